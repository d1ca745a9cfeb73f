package backend

import (
	"crypto/sha256"
	"unsafe"

	"github.com/sluice-proxy/sluice/limiter"
)

// KeyDigestLen is the length of the digest that ends every key Key makes:
// 128 bits of SHA-256, in lowercase hex.
const KeyDigestLen = 32

// Key is the Redis key of the bucket that limit, deciding with algorithm
// alg, keeps for the key value v: "sluice:<limit>:" followed by the first
// 128 bits of SHA-256(v) in hex. A sliding log's bucket is a sorted set
// where every other algorithm keeps a hash, so its keys are named apart,
// "sluice:<limit>.log:<digest>" ('.' is not allowed in a limit's name):
// switching a limit to or from sliding_log then starts fresh buckets,
// where sharing the key would fail every call on an existing bucket with
// WRONGTYPE until it expired, and with it switch the limit to its
// failure_policy. The hash algorithms read fields of their own
// ("at"/"n", "w"/"c"/"p"), so switching among them starts fresh too.
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
func Key(limit string, alg limiter.Algorithm, v string) string {
	var buf [7 + 64 + len(logSuffix) + 1 + KeyDigestLen]byte
	return string(AppendKey(buf[:0], limit, alg, v))
}

// logSuffix names a sliding log's keys apart (see Key).
const logSuffix = ".log"

// AppendKey appends Key(limit, alg, v) to dst.
func AppendKey(dst []byte, limit string, alg limiter.Algorithm, v string) []byte {
	const hex = "0123456789abcdef"
	// Sum256 only reads its argument, so the string's bytes can be
	// hashed in place instead of copied: a key value may be tens of KiB.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(v), len(v)))
	dst = append(dst, "sluice:"...)
	dst = append(dst, limit...)
	if alg == limiter.SlidingLog {
		dst = append(dst, logSuffix...)
	}
	dst = append(dst, ':')
	for _, b := range sum[:KeyDigestLen/2] {
		dst = append(dst, hex[b>>4], hex[b&15])
	}
	return dst
}
