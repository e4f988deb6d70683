package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Uploads follow Slack's documented flow (docs.slack.dev: files.getUploadURLExternal,
// files.completeUploadExternal; what slack-go's UploadFileContext does):
//
//  1. files.getUploadURLExternal (filename and length required) answers an upload_url and a file_id;
//  2. the bytes are POSTed to upload_url (the fake takes a raw body or a multipart form with one file,
//     and answers "OK - <length>"), with the bot token;
//  3. files.completeUploadExternal (files: a JSON array of {id, title}; channel_id, thread_ts,
//     initial_comment) shares the files: one message in the channel (or thread), its text the
//     initial comment, its files the files shared.
//
// Guesses (the documentation lists the error codes without saying which case gives which): the
// fake's upload_url is on its own host (Slack's is files.slack.com; slack-go sends the token only to
// Slack's hosts or to the API URL's); a completion naming a file never uploaded, or completed already
// (an upload URL is good once), answers file_not_found; one whose bytes differ in length from the
// length announced answers file_upload_size_mismatch.

// File is a file uploaded to the fake.
type File struct {
	ID      string
	Name    string // filename given to files.getUploadURLExternal
	Title   string // title given at completion
	Length  int    // length announced
	Content []byte // bytes uploaded (nil: none yet)
	Shared  bool   // completed and shared
	Channel string // where it was shared
	TS      string // the message that shares it
}

// Files returns a snapshot of every file in the order they were announced.
func (s *Server) Files() []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]File, len(s.files))
	for i, f := range s.files {
		out[i] = *f
		out[i].Content = append([]byte(nil), f.Content...)
	}
	return out
}

func (s *Server) fileLocked(id string) *File {
	for _, f := range s.files {
		if f.ID == id {
			return f
		}
	}
	return nil
}

func (s *Server) uploadURLLocked(f url.Values) reply {
	name := f.Get("filename")
	length, err := strconv.Atoi(f.Get("length"))
	if name == "" || err != nil || length <= 0 {
		return fail("invalid_arguments")
	}
	file := &File{ID: fmt.Sprintf("F%06d", len(s.files)+1), Name: name, Length: length}
	s.files = append(s.files, file)
	return reply{body: map[string]any{"upload_url": s.http.URL + "/upload/" + file.ID, "file_id": file.ID}}
}

// serveUpload takes the bytes of a file at its upload URL.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+s.opts.botToken {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	var body io.Reader = r.Body
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		part, err := mr.NextPart()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = part
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	s.calls["upload"]++
	f := s.fileLocked(strings.TrimPrefix(r.URL.Path, "/upload/"))
	if f == nil || f.Shared {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	f.Content = data
	_, _ = fmt.Fprintf(w, "OK - %d", len(data))
}

func (s *Server) completeUploadLocked(f url.Values) reply {
	var sums []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(f.Get("files")), &sums); err != nil || len(sums) == 0 {
		return fail("invalid_arguments")
	}
	channel, thread := f.Get("channel_id"), f.Get("thread_ts")
	if channel == "" && thread != "" {
		return fail("invalid_arguments")
	}
	if thread != "" && !s.isParentLocked(channel, thread) {
		return fail("thread_not_found")
	}
	var files []*File
	for _, sum := range sums {
		file := s.fileLocked(sum.ID)
		switch {
		case file == nil || file.Shared || file.Content == nil:
			return fail("file_not_found")
		case len(file.Content) != file.Length:
			return fail("file_upload_size_mismatch")
		}
		file.Title = sum.Title
		files = append(files, file)
	}
	out := make([]map[string]any, len(files))
	var m *Message
	if channel != "" {
		m = &Message{Channel: channel, TS: s.nextTSLocked(), ThreadTS: thread, User: BotUserID, Text: f.Get("initial_comment")}
	}
	for i, file := range files {
		file.Shared = true
		out[i] = map[string]any{"id": file.ID, "title": file.Title}
		if m != nil {
			file.Channel, file.TS = channel, m.TS
			m.Files = append(m.Files, *file)
		}
	}
	if m != nil {
		s.addLocked(m)
	}
	return reply{body: map[string]any{"files": out}}
}

// wireFiles is the files of a message as Slack lists them in its message objects.
func wireFiles(fs []File) []map[string]any {
	out := make([]map[string]any, len(fs))
	for i, f := range fs {
		out[i] = map[string]any{"id": f.ID, "name": f.Name, "title": f.Title, "size": len(f.Content),
			"mimetype": "text/markdown", "filetype": "markdown"}
	}
	return out
}
