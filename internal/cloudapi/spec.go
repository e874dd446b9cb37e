package cloudapi

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
)

// RecordName is what a record id must look like to name a cloud sandbox, and a container in a
// VM's stack.
var RecordName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// CheckRecord fails with ErrInvalid unless spec.Name is a [RecordName] and spec's record label
// (agentenv.LabelRecord) is that name: what every cloud's Create checks first, so that a sandbox
// is always found again by its record.
func CheckRecord(spec agentenv.SandboxSpec) error {
	if !RecordName.MatchString(spec.Name) {
		return fmt.Errorf("sandbox name %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}: %w", spec.Name, agentenv.ErrInvalid)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return fmt.Errorf("label %s=%q, want the record id: %w", agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	return nil
}

// Labels returns spec's labels with its expiry (agentenv.LabelExpires, RFC 3339 in UTC) when
// spec has one and its labels do not: a fresh map, never nil, for the cloud's metadata.
func Labels(spec agentenv.SandboxSpec) map[string]string {
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if _, ok := labels[agentenv.LabelExpires]; !ok && !spec.Expires.IsZero() {
		labels[agentenv.LabelExpires] = spec.Expires.UTC().Format(time.RFC3339)
	}
	return labels
}

// JoinPorts is ports as "8080,9000": the value of the label in which a cloud that keeps no
// ports of its own remembers a sandbox's, so that Get and List can name its endpoints.
func JoinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, port := range ports {
		s[i] = strconv.Itoa(port)
	}
	return strings.Join(s, ",")
}

// Endpoints is the endpoint of each port of joined (a [JoinPorts] value) at url(port), keyed by
// the port as text; nil when joined names none. What is not a number is skipped.
func Endpoints(joined string, url func(port int) string) map[string]string {
	var out map[string]string
	for port := range strings.SplitSeq(joined, ",") {
		if n, err := strconv.Atoi(port); err == nil {
			if out == nil {
				out = map[string]string{}
			}
			out[port] = url(n)
		}
	}
	return out
}

// ImageName is what an image a cloud takes by name looks like: a managed name ("universal",
// "node:24"), a registry reference, a digest.
var ImageName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_./:@-]{0,254}$`)

// CheckImages fails with ErrInvalid naming the first of images that is neither empty (the
// cloud's default) nor an [ImageName].
func CheckImages(images ...string) error {
	for _, img := range images {
		if img != "" && !ImageName.MatchString(img) {
			return fmt.Errorf("image %q: want an image name: %w", img, agentenv.ErrInvalid)
		}
	}
	return nil
}
