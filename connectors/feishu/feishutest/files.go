package feishutest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// Files (im/v1/files, open.feishu.cn "上传文件"): a multipart form with file_type (opus, mp4, pdf, doc,
// xls, ppt or stream), file_name and file (at most 30 MB, not empty) answers data.file_key; a message of
// msg_type "file" names it in its content ({"file_key": ...}). Guess: the fake refuses a file message
// naming a key it never issued with CodeInvalidParam; the documentation lists file errors without
// saying which code that case gets.

// RouteFiles is the route of file uploads.
const RouteFiles = "/open-apis/im/v1/files"

const fileMaxBytes = 30 << 20

var fileTypes = []string{"opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"}

// File is a file uploaded to the fake.
type File struct {
	Key, Type, Name string
	Content         []byte
}

// Files returns a snapshot of every file uploaded, oldest first.
func (s *Server) Files() []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]File, len(s.files))
	for i, f := range s.files {
		out[i] = *f
		out[i].Content = slices.Clone(f.Content)
	}
	return out
}

func (s *Server) handleFile(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(fileMaxBytes + 1<<20); err != nil {
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: not a multipart form")
		return
	}
	ft, name := r.FormValue("file_type"), r.FormValue("file_name")
	f, _, err := r.FormFile("file")
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(f, fileMaxBytes+1))
		_ = f.Close()
	}
	switch {
	case !slices.Contains(fileTypes, ft):
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: file_type")
	case name == "":
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: file_name is required")
	case err != nil || len(data) == 0 || len(data) > fileMaxBytes:
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: file empty, missing or over 30 MB")
	default:
		s.mu.Lock()
		defer s.mu.Unlock()
		defer s.notifyLocked()
		s.seq++
		file := &File{Key: fmt.Sprintf("file_v3_fake%06d", s.seq), Type: ft, Name: name, Content: data}
		s.files = append(s.files, file)
		writeOK(w, map[string]any{"file_key": file.Key})
	}
}

// unknownFileLocked reports whether content, a message's of msgType, is a file message naming no
// uploaded file.
func (s *Server) unknownFileLocked(msgType, content string) bool {
	if msgType != "file" {
		return false
	}
	var c struct {
		FileKey string `json:"file_key"`
	}
	_ = json.Unmarshal([]byte(content), &c)
	return !slices.ContainsFunc(s.files, func(f *File) bool { return f.Key == c.FileKey })
}
