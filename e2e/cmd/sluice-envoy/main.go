// Command sluice-envoy runs an Envoy v3 bootstrap on the sluice wazero host,
// standing in for Envoy where no Envoy binary is available:
//
//	go run ./e2e/cmd/sluice-envoy -c envoy/envoy.yaml --concurrency 2
//
// Flags mirror Envoy's where Envoy has them (-c/--config-path,
// --config-yaml, --concurrency, -l/--log-level, --mode serve|validate);
// --wasm-profile picks the Envoy release the wasm host imitates;
// --cpu-profile writes a Go CPU profile of the serving run (Envoy's
// gperftools profiler has no flag; the benchmarks use this to see where a
// worker's time goes under load).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/e2e/host"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// drainTimeout bounds how long in-flight requests may run after a signal.
const drainTimeout = 10 * time.Second

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-envoy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configPath, configYAML, logLevel, profile, mode, cpuProfile string
		concurrency                                                 int
	)
	fs.StringVar(&configPath, "c", "", "path to the v3 bootstrap YAML (alias of --config-path)")
	fs.StringVar(&configPath, "config-path", "", "path to the v3 bootstrap YAML")
	fs.StringVar(&configYAML, "config-yaml", "", "bootstrap YAML merged over --config-path")
	fs.IntVar(&concurrency, "concurrency", runtime.NumCPU(), "number of worker threads (one wasm VM each)")
	fs.StringVar(&logLevel, "l", "info", "log level (alias of --log-level)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: trace, debug, info, warning, error, critical, off")
	fs.StringVar(&profile, "wasm-profile", string(host.ProfileEnvoy139), "Envoy release the wasm host imitates: envoy-1.33 or envoy-1.39")
	fs.StringVar(&mode, "mode", "serve", "serve, or validate: load and check the config, then exit")
	fs.StringVar(&cpuProfile, "cpu-profile", "", "write a Go CPU profile of the serving run to this file")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %v\n", fs.Args())
		return 1
	}
	level, err := envoy.ParseLevel(logLevel)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	prof, err := host.ParseProfile(profile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if concurrency < 1 {
		fmt.Fprintln(stderr, "--concurrency must be at least 1")
		return 1
	}
	log := envoy.NewLogger(stderr, level)

	cfg, err := envoy.LoadMerged(configPath, configYAML)
	if err != nil {
		log.Logf(envoy.LevelCritical, "main", "error initializing configuration '%s': %v", configPath, err)
		return 1
	}
	switch mode {
	case "validate":
		for _, l := range cfg.Listeners {
			for _, f := range l.HTTPFilters {
				if f.Wasm == nil {
					continue
				}
				if _, err := f.Wasm.LoadCode(); err != nil {
					log.Logf(envoy.LevelCritical, "main", "error initializing configuration '%s': %v", configPath, err)
					return 1
				}
			}
		}
		fmt.Fprintf(stdout, "configuration '%s' OK\n", configPath)
		return 0
	case "serve":
	default:
		fmt.Fprintf(stderr, "unknown --mode %q (want serve or validate)\n", mode)
		return 1
	}

	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			log.Logf(envoy.LevelCritical, "main", "cpu profile: %v", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			log.Logf(envoy.LevelCritical, "main", "cpu profile: %v", err)
			return 1
		}
		// Deferred so the profile is complete whichever way serving ends.
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				log.Logf(envoy.LevelError, "main", "cpu profile: %v", err)
			}
		}()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := envoy.NewServer(cfg, envoy.Options{
		Concurrency: concurrency,
		Profile:     prof,
		Logger:      log,
		ConfigPath:  configPath,
	})
	if err := srv.Start(ctx); err != nil {
		log.Logf(envoy.LevelCritical, "main", "error starting server: %v", err)
		return 1
	}
	code := 0
	select {
	case <-ctx.Done():
		log.Logf(envoy.LevelWarning, "main", "caught signal, draining")
	case <-srv.Quit():
	case err := <-srv.Errors():
		log.Logf(envoy.LevelCritical, "main", "%v", err)
		code = 1
	}
	stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Logf(envoy.LevelError, "main", "shutdown: %v", err)
		code = 1
	}
	return code
}
