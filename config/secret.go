package config

import (
	"fmt"
	"os"
	"strings"
)

// secretPair checks a secret given inline (value) or in a file (file):
// not both, and one of them when required; errors name key.
func secretPair(key, value, file string, required bool) error {
	switch {
	case value != "" && file != "":
		return keyErr(key, "set either %s or %s_file, not both", lastPart(key), lastPart(key))
	case value == "" && file == "" && required:
		return keyErr(key, "required (or %s_file)", lastPart(key))
	}
	return nil
}

func lastPart(key string) string { return key[strings.LastIndex(key, ".")+1:] }

// secretRef is one secret key of the config: its inline value and its file.
type secretRef struct {
	key         string // http.api_token: the file's key is key+"_file"
	value, file *string
}

// secrets are the config's secret keys, of the sections it has.
func (c *Config) secrets() []secretRef {
	s := []secretRef{{"http.api_token", &c.HTTP.APIToken, &c.HTTP.APITokenFile}}
	if sl := c.Slack; sl != nil {
		s = append(s, secretRef{"slack.bot_token", &sl.BotToken, &sl.BotTokenFile},
			secretRef{"slack.app_token", &sl.AppToken, &sl.AppTokenFile},
			secretRef{"slack.signing_secret", &sl.SigningSecret, &sl.SigningSecretFile})
	}
	if f := c.Feishu; f != nil {
		s = append(s, secretRef{"feishu.app_secret", &f.AppSecret, &f.AppSecretFile},
			secretRef{"feishu.verification_token", &f.VerificationToken, &f.VerificationTokenFile},
			secretRef{"feishu.encrypt_key", &f.EncryptKey, &f.EncryptKeyFile})
	}
	return s
}

// Secret returns value, or the trimmed content of file when value is empty.
// A secret file must be a regular file that neither group nor others may
// read or write (mode 0600 or stricter); otherwise the error names the key
// and says how to fix it.
func Secret(key, value, file string) (string, error) {
	if value != "" || file == "" {
		return value, nil
	}
	if err := checkSecretFile(file); err != nil {
		return "", keyErr(key+"_file", "%v", err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", keyErr(key+"_file", "%v", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// checkSecretFile refuses a secret file that is not a regular file or that
// group or others may access.
func checkSecretFile(file string) error {
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", file)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: group or others may read it; run chmod 600 %s", file, perm, file)
	}
	return nil
}
