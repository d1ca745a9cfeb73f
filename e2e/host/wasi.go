package host

import (
	"context"
	"crypto/rand"
	"sort"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

func nilModuleConfig(name string) wazero.ModuleConfig {
	return wazero.NewModuleConfig().WithName(name)
}

// WASI errno values used by Envoy's implementations.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoNoent   = 44
	errnoNosys   = 52
	errnoNotsup  = 58
)

var processStart = time.Now()

func wasiFuncs() []hostFunc {
	enosys := func(v *vm, _ context.Context, s []uint64) { s[0] = errnoNosys }
	stub := func(name string, params ...api.ValueType) hostFunc {
		return hostFunc{name: name, params: params, results: oneI32, fn: enosys}
	}
	return []hostFunc{
		{name: "fd_write", params: sig(4), results: oneI32, fn: wasiFdWrite},
		{name: "fd_read", params: sig(4), results: oneI32, fn: enosys},
		{name: "fd_seek", params: []api.ValueType{i32, i64, i32, i32}, results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) {
			// Envoy logs and pretends success.
			v.p.rt.log(LogError, v.p.cfg.Name, "wasi_unstable fd_seek")
			s[0] = errnoSuccess
		}},
		{name: "fd_close", params: sig(1), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) {
			v.p.rt.log(LogError, v.p.cfg.Name, "wasi_unstable fd_close")
			s[0] = errnoSuccess
		}},
		{name: "fd_fdstat_get", params: sig(2), results: oneI32, fn: wasiFdstatGet},
		{name: "environ_get", params: sig(2), results: oneI32, fn: wasiEnvironGet},
		{name: "environ_sizes_get", params: sig(2), results: oneI32, fn: wasiEnvironSizesGet},
		{name: "args_get", params: sig(2), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) { s[0] = errnoSuccess }},
		{name: "args_sizes_get", params: sig(2), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) {
			if !v.mem.WriteUint32Le(uint32(s[0]), 0) || !v.mem.WriteUint32Le(uint32(s[1]), 0) {
				s[0] = errnoFault
				return
			}
			s[0] = errnoSuccess
		}},
		{name: "clock_time_get", params: []api.ValueType{i32, i64, i32}, results: oneI32, fn: wasiClockTimeGet},
		{name: "random_get", params: sig(2), results: oneI32, fn: wasiRandomGet},
		{name: "proc_exit", params: sig(1), fn: func(v *vm, _ context.Context, s []uint64) {
			// Envoy only logs; execution continues after the import returns.
			v.p.rt.log(LogError, v.p.cfg.Name, "wasi_unstable proc_exit")
		}},
		{name: "path_open", params: []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, results: oneI32,
			fn: func(v *vm, _ context.Context, s []uint64) { s[0] = errnoNoent }},
		{name: "fd_prestat_get", params: sig(2), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) { s[0] = errnoBadf }},
		{name: "fd_prestat_dir_name", params: sig(3), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) { s[0] = errnoNosys }},
		{name: "poll_oneoff", params: sig(4), results: oneI32, fn: wasiPollOneoff},
		{name: "sched_yield", results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) { s[0] = errnoSuccess }},
		stub("fd_fdstat_set_flags", i32, i32),
		// The rest of preview1, present only in the envoy-1.39 profile.
		stub("clock_res_get", i32, i32),
		stub("fd_advise", i32, i64, i64, i32),
		stub("fd_allocate", i32, i64, i64),
		stub("fd_datasync", i32),
		stub("fd_fdstat_set_rights", i32, i64, i64),
		stub("fd_filestat_get", i32, i32),
		stub("fd_filestat_set_size", i32, i64),
		stub("fd_filestat_set_times", i32, i64, i64, i32),
		stub("fd_pread", i32, i32, i32, i64, i32),
		stub("fd_pwrite", i32, i32, i32, i64, i32),
		stub("fd_readdir", i32, i32, i32, i64, i32),
		stub("fd_renumber", i32, i32),
		stub("fd_sync", i32),
		stub("fd_tell", i32, i32),
		stub("path_create_directory", i32, i32, i32),
		stub("path_filestat_get", i32, i32, i32, i32, i32),
		stub("path_filestat_set_times", i32, i32, i32, i32, i64, i64, i32),
		stub("path_link", i32, i32, i32, i32, i32, i32, i32),
		stub("path_readlink", i32, i32, i32, i32, i32, i32),
		stub("path_remove_directory", i32, i32, i32),
		stub("path_rename", i32, i32, i32, i32, i32, i32),
		stub("path_symlink", i32, i32, i32, i32, i32),
		stub("path_unlink_file", i32, i32, i32),
		stub("proc_raise", i32),
		stub("sock_accept", i32, i32, i32),
		stub("sock_recv", i32, i32, i32, i32, i32, i32),
		stub("sock_send", i32, i32, i32, i32, i32),
		stub("sock_shutdown", i32, i32),
	}
}

func wasiFdWrite(v *vm, _ context.Context, s []uint64) {
	fd, iovs, iovsLen, nwrittenPtr := uint32(s[0]), uint32(s[1]), uint32(s[2]), uint32(s[3])
	var level LogLevel
	switch fd {
	case 1:
		level = LogInfo
	case 2:
		level = LogError
	default:
		s[0] = errnoBadf
		return
	}
	buf := v.scratch[:0]
	for i := uint32(0); i < iovsLen; i++ {
		base, ok1 := v.mem.ReadUint32Le(iovs + i*8)
		n, ok2 := v.mem.ReadUint32Le(iovs + i*8 + 4)
		if !ok1 || !ok2 {
			s[0] = errnoFault
			return
		}
		if n == 0 {
			continue
		}
		b, ok := v.mem.Read(base, n)
		if !ok {
			s[0] = errnoFault
			return
		}
		buf = append(buf, b...)
	}
	v.scratch = buf
	written := len(buf)
	if written > 0 {
		msg := string(buf)
		msg = strings.TrimSuffix(msg, "\n")
		v.p.rt.log(level, v.p.cfg.Name, msg)
	}
	if !v.mem.WriteUint32Le(nwrittenPtr, uint32(written)) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiFdstatGet(v *vm, _ context.Context, s []uint64) {
	fd, out := uint32(s[0]), uint32(s[1])
	if fd != 1 && fd != 2 {
		s[0] = errnoBadf
		return
	}
	// 24-byte fdstat: filetype 0, rights_base = FD_WRITE (64), rest zero.
	var st [24]byte
	st[8] = 64
	if !v.mem.Write(out, st[:]) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func sortedEnv(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, val := range env {
		out = append(out, k+"="+val)
	}
	sort.Strings(out)
	return out
}

func wasiEnvironSizesGet(v *vm, _ context.Context, s []uint64) {
	env := sortedEnv(v.p.cfg.Environment)
	size := 0
	for _, e := range env {
		size += len(e) + 1
	}
	if !v.mem.WriteUint32Le(uint32(s[0]), uint32(len(env))) || !v.mem.WriteUint32Le(uint32(s[1]), uint32(size)) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiEnvironGet(v *vm, _ context.Context, s []uint64) {
	arr, buf := uint32(s[0]), uint32(s[1])
	for _, e := range sortedEnv(v.p.cfg.Environment) {
		if !v.mem.WriteUint32Le(arr, buf) {
			s[0] = errnoFault
			return
		}
		b := append([]byte(e), 0)
		if !v.mem.Write(buf, b) {
			s[0] = errnoFault
			return
		}
		buf += uint32(len(b))
		arr += 4
	}
	s[0] = errnoSuccess
}

func wasiClockTimeGet(v *vm, _ context.Context, s []uint64) {
	id, out := uint32(s[0]), uint32(s[2])
	var now uint64
	switch id {
	case 0: // realtime
		if c := v.p.rt.clock; c != nil {
			now = uint64(c().UnixNano())
		} else {
			now = uint64(time.Now().UnixNano())
		}
	case 1: // monotonic
		if m := v.p.rt.monotonic; m != nil {
			now = uint64(m())
		} else if c := v.p.rt.clock; c != nil {
			now = uint64(c().UnixNano())
		} else {
			now = uint64(time.Since(processStart).Nanoseconds()) + 1
		}
	default:
		s[0] = errnoNotsup
		return
	}
	if !v.mem.WriteUint64Le(out, now) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiRandomGet(v *vm, _ context.Context, s []uint64) {
	buf, n := uint32(s[0]), uint32(s[1])
	b, ok := v.mem.Read(buf, n)
	if !ok {
		s[0] = errnoFault
		return
	}
	_, _ = rand.Read(b)
	s[0] = errnoSuccess
}

func wasiPollOneoff(v *vm, _ context.Context, s []uint64) {
	if v.p.rt.profile == ProfileEnvoy133 {
		s[0] = errnoNosys
		return
	}
	// envoy-1.39: succeeds immediately with no events.
	if !v.mem.WriteUint32Le(uint32(s[3]), 0) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}
