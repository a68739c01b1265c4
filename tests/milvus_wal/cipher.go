package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/milvus-io/milvus-proto/go-api/v2/hook"
)

// testCipher is a hook.Cipher with one fixed key, registered with Milvus's message package so that
// its builder encrypts a payload and writes the `_ch` cipher header exactly as with a real KMS
// plugin. AES-256-GCM, key sha256(testKeyPhrase); a payload is nonce (12 bytes) then ciphertext.
type testCipher struct{}

const testKeyPhrase = "deltanode milvus-wal-writer test key"

// testSafeKey stands for the wrapped data key a real plugin returns; it travels in `_ch`.
var testSafeKey = []byte("deltanode-test-safe-key")

func (testCipher) Init(map[string]string) error { return nil }

func (testCipher) GetEncryptor(ezID, collectionID int64) (hook.Encryptor, []byte, error) {
	aead, err := testAEAD()
	if err != nil {
		return nil, nil, err
	}
	return gcmCodec{aead}, testSafeKey, nil
}

func (testCipher) GetDecryptor(ezID, collectionID int64, safeKey []byte) (hook.Decryptor, error) {
	aead, err := testAEAD()
	if err != nil {
		return nil, err
	}
	return gcmCodec{aead}, nil
}

func (testCipher) GetUnsafeKey(ezID, collectionID int64) []byte {
	key := sha256.Sum256([]byte(testKeyPhrase))
	return key[:]
}

func testAEAD() (cipher.AEAD, error) {
	key := sha256.Sum256([]byte(testKeyPhrase))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// gcmCodec encrypts and decrypts with one AES-GCM key.
type gcmCodec struct{ aead cipher.AEAD }

func (c gcmCodec) Encrypt(plain []byte) ([]byte, error) {
	nonce := make([]byte, c.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return c.aead.Seal(nonce, nonce, plain, nil), nil
}

func (c gcmCodec) Decrypt(sealed []byte) ([]byte, error) {
	n := c.aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("ciphertext shorter than its nonce")
	}
	return c.aead.Open(nil, sealed[:n], sealed[n:], nil)
}
