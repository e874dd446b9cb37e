package dockervm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
	"github.com/agentenv/agentenv/internal/registrylogin"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// daemonConfigPath is where the inner engine reads its configuration at start.
const daemonConfigPath = "/etc/docker/daemon.json"

// daemonConfig is the inner engine's configuration: the subnets of the host engine's default
// bridge network, where a VM reaches this host, are insecure registries (plain HTTP is allowed
// there, as the host engine allows it on 127.0.0.0/8), so that a registry on this host serves
// the VM's pulls. It is nil when the bridge cannot be read: pulls then need HTTPS.
func (p *Provider) daemonConfig(ctx context.Context) []byte {
	res, err := p.cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		p.log.Debug("no bridge network: the vm's engine pulls over HTTPS only", "err", err)
		return nil
	}
	var cidrs []string
	for _, c := range res.Network.IPAM.Config {
		if c.Subnet.IsValid() {
			cidrs = append(cidrs, c.Subnet.Masked().String())
		}
	}
	if len(cidrs) == 0 {
		return nil
	}
	data, err := json.Marshal(map[string][]string{"insecure-registries": cidrs})
	if err != nil {
		return nil
	}
	return data
}

// writeDaemonConfig writes the inner engine's configuration into the created, not yet started,
// VM container id.
func (p *Provider) writeDaemonConfig(ctx context.Context, id string) error {
	data := p.daemonConfig(ctx)
	if data == nil {
		return nil
	}
	archive, err := filetar.Pack("/", map[string][]byte{daemonConfigPath: data})
	if err != nil {
		return err
	}
	if _, err := p.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(archive)}); err != nil {
		return fmt.Errorf("write %s: %w", daemonConfigPath, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	return nil
}

// image makes spec's image available in vm's engine and returns the reference to run and, for
// a pinned image, how it came there. spec.Pinned is pulled by the VM's engine, by digest, a
// registry on this host's loopback reached at the VM's gateway (this host as the VM sees it);
// when that fails, spec.Image is uploaded from this host as without a pin, and the note says
// why.
func (p *Provider) image(ctx context.Context, in *client.Client, vm string, outer container.InspectResponse, spec agentenv.SandboxSpec) (image, note string, err error) {
	if spec.Pinned == "" {
		return spec.Image, "", p.ensureImage(ctx, in, vm, spec.Image)
	}
	ref := inVM(spec.Pinned, gateway(outer))
	start := time.Now()
	perr := p.pull(ctx, in, vm, ref, spec.PullAuth)
	if perr == nil {
		note = "pulled " + spec.Pinned + " in the vm"
		if ref != spec.Pinned {
			note += " (as " + ref + ")"
		}
		p.log.Debug("image pulled into vm", "record_id", vm, "image", ref, "took", time.Since(start))
		return ref, note, nil
	}
	if ctx.Err() != nil {
		return "", "", ctx.Err()
	}
	note = fmt.Sprintf("pull of %s failed (%v); uploading %s from this host", spec.Pinned, perr, spec.Image)
	p.log.Debug("pull into vm failed; uploading from this host", "record_id", vm, "image", ref, "err", perr)
	if err := p.ensureImage(ctx, in, vm, spec.Image); err != nil {
		return "", "", fmt.Errorf("%s: %w", note, err)
	}
	return spec.Image, note, nil
}

// pull has vm's engine pull ref unless it holds it already, within vmdocker.PullBound, logging in with
// auth (nil: anonymously). Pulls of one image into one VM are serialized.
func (p *Provider) pull(ctx context.Context, in *client.Client, vm, ref string, auth *agentenv.RegistryAuth) error {
	defer p.locks.Lock(vm + "\x00" + ref)()
	if _, err := in.ImageInspect(ctx, ref); err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, vmdocker.PullBound)
	defer cancel()
	resp, err := in.ImagePull(ctx, ref, client.ImagePullOptions{RegistryAuth: registrylogin.Header(ref, auth)})
	if err != nil {
		return ctxerr.Prefer(ctx, err)
	}
	defer resp.Close()
	if err := resp.Wait(ctx); err != nil {
		return ctxerr.Prefer(ctx, err)
	}
	if _, err := in.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("pulled, then not found: %w", err)
	}
	return nil
}

// gateway is the address at which the VM reaches this host: its network's gateway, or "".
func gateway(outer container.InspectResponse) string {
	if outer.NetworkSettings == nil {
		return ""
	}
	for _, n := range outer.NetworkSettings.Networks {
		if n != nil && n.Gateway.IsValid() {
			return n.Gateway.String()
		}
	}
	return ""
}

// inVM is ref as the VM reaches it: a registry on this host's loopback (127.0.0.0/8,
// localhost, ::1) at gw, the VM's way to this host; any other ref as it is.
func inVM(ref, gw string) string {
	host, rest, ok := strings.Cut(ref, "/")
	if !ok || gw == "" {
		return ref
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = host, ""
	}
	ip := net.ParseIP(name)
	if name != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ref
	}
	if port != "" {
		return net.JoinHostPort(gw, port) + "/" + rest
	}
	return gw + "/" + rest
}
