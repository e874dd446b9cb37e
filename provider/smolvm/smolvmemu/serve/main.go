// Command serve runs the smolvm emulator (package smolvmemu) on its own, its machines with no
// image backed by Docker-in-Docker VMs of this host's engine, so that agentenv's CLI can be run
// by hand against it (provider.smol_vm.url = what it prints). It is a development aid for a
// machine with no smolvm, not part of agentenv's CLI. It serves until interrupted, then deletes
// every machine it holds and removes its VMs and their template.
//
//	go run ./provider/smolvm/smolvmemu/serve -listen 127.0.0.1:7878 -preload agentenv:dev
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"

	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/smolvm/smolvmemu"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "TCP address, or unix:PATH, to serve the API on")
	preload := flag.String("preload", "", "comma list of this host's images every VM's engine starts with")
	label := flag.String("label", "agentenv-emulator=smolvm", "key=value label on everything made on the engine")
	flag.Parse()
	if err := run(*listen, *preload, *label); err != nil {
		fmt.Fprintln(os.Stderr, "smolvmemu:", err)
		os.Exit(1)
	}
}

func run(listen, preload, label string) error {
	k, v, ok := strings.Cut(label, "=")
	if !ok {
		return fmt.Errorf("-label %q: want key=value", label)
	}
	network, addr := "tcp", listen
	if p, isUnix := strings.CutPrefix(listen, "unix:"); isUnix {
		network, addr = "unix", p
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	var images []string
	if preload != "" {
		images = strings.Split(preload, ",")
	}
	host, err := emuvm.New(emuvm.Config{Labels: map[string]string{k: v}, InMemory: true, Preload: images},
		slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		return err
	}
	defer host.Close(context.Background())
	emu := smolvmemu.StartOn(l)
	defer emu.Close()
	emu.SetVMBackend(emuvm.DinD(host))
	if network == "unix" {
		fmt.Println("unix://" + addr)
	} else {
		fmt.Println(emu.URL())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
	if left := emu.Running(); len(left) > 0 {
		fmt.Fprintln(os.Stderr, "smolvmemu: deleting machines left:", strings.Join(left, " "))
	}
	return nil
}
