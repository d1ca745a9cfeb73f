package backend

import (
	"crypto/sha256"
	"unsafe"
)

// KeyDigestLen is the length of the digest that ends every key Key makes:
// 128 bits of SHA-256, in lowercase hex.
const KeyDigestLen = 32

// Key is the Redis key of limit's bucket for the key value v:
// "sluice:<limit>:" followed by the first 128 bits of SHA-256(v) in hex.
//
// Every key value is digested, never sent as it is, for three reasons:
//   - the key travels in the Webdis URL (percent-encoded, up to three
//     bytes per byte), and a client-chosen value of tens of KiB made
//     Webdis refuse the call, switching the limit off for that client;
//   - with no plain-text form, no key value can name the bucket of
//     another one (a plain text that spelled another value's hash did);
//   - client IPs and API keys do not sit in Redis in plain text.
//
// limit is a config-validated name (at most 64 of A-Z a-z 0-9 _ -), so
// the key, and with it every call's URL, has a bounded length.
func Key(limit, v string) string {
	var buf [7 + 64 + 1 + KeyDigestLen]byte
	return string(AppendKey(buf[:0], limit, v))
}

// AppendKey appends Key(limit, v) to dst.
func AppendKey(dst []byte, limit, v string) []byte {
	const hex = "0123456789abcdef"
	// Sum256 only reads its argument, so the string's bytes can be
	// hashed in place instead of copied: a key value may be tens of KiB.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(v), len(v)))
	dst = append(dst, "sluice:"...)
	dst = append(dst, limit...)
	dst = append(dst, ':')
	for _, b := range sum[:KeyDigestLen/2] {
		dst = append(dst, hex[b>>4], hex[b&15])
	}
	return dst
}
