package s3local

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

const credentialsFile = "credentials.json"

// rootCredentials is the root account of one store, as kept in
// Dir/credentials.json.
type rootCredentials struct {
	AccessKey string `json:"access_key_id"`
	SecretKey string `json:"secret_access_key"`
}

// loadOrCreateCredentials reads the credentials at path, or makes new random
// ones and stores them there (mode 0600) if the file does not exist. The file
// appears atomically: a concurrent starter either sees none or all of it.
func loadOrCreateCredentials(path string) (rootCredentials, error) {
	c, err := readCredentials(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	c = rootCredentials{
		// rand.Text is 26 characters of base32 (128 bits); AWS access key
		// ids are 20 upper-case characters, secrets 40.
		AccessKey: rand.Text()[:20],
		SecretKey: rand.Text() + rand.Text(),
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return rootCredentials{}, fmt.Errorf("s3local: encode credentials: %w", err)
	}
	if err := writeFileExclusive(path, append(b, '\n')); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Someone else created it first; theirs wins.
			return readCredentials(path)
		}
		return rootCredentials{}, fmt.Errorf("s3local: store credentials %s: %w", path, err)
	}
	return c, nil
}

func readCredentials(path string) (rootCredentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return rootCredentials{}, fmt.Errorf("s3local: read credentials %s: %w", path, err)
	}
	var c rootCredentials
	if err := json.Unmarshal(b, &c); err != nil {
		return rootCredentials{}, fmt.Errorf("s3local: parse credentials %s: %w", path, err)
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return rootCredentials{}, fmt.Errorf("s3local: credentials %s: access_key_id and secret_access_key must both be set", path)
	}
	return c, nil
}

// writeFileExclusive writes data to a temporary file (mode 0600) next to path
// and links it into place, failing with fs.ErrExist if path already exists.
func writeFileExclusive(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return os.Link(tmp, path)
}

// writeFileReplace writes data to a temporary file (mode 0600) next to path
// and renames it over path.
func writeFileReplace(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeTemp writes data to a new file with mode 0600 in path's directory,
// syncs it and returns its name.
func writeTemp(path string, data []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}
