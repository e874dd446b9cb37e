package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/agentenv/agentenv"
)

// AnnotationLabels holds the exact agentenv label map of an object as JSON; the object's
// Kubernetes labels hold the same map in label-safe form.
const AnnotationLabels = "agentenv.labels"

// expiresLayout is the label-safe form of agentenv.expires.
const expiresLayout = "20060102T150405Z"

// checkName reports whether s is a DNS-1123 label, as Pod, Service and Namespace names must be.
func checkName(s string) error {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return fmt.Errorf("name %q: %s: %w", s, strings.Join(errs, "; "), agentenv.ErrInvalid)
	}
	return nil
}

// checkSubdomain reports whether s is a DNS-1123 subdomain, as a node name must be.
func checkSubdomain(s string) error {
	if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
		return fmt.Errorf("name %q: %s: %w", s, strings.Join(errs, "; "), agentenv.ErrInvalid)
	}
	return nil
}

// labelValue returns the label-safe form of value under key: value itself when Kubernetes
// accepts it, agentenv.expires in a compact time form, anything else as a digest. The mapping is
// deterministic, so selectors use it too.
func labelValue(key, value string) string {
	if len(validation.IsValidLabelValue(value)) == 0 {
		return value
	}
	if key == agentenv.LabelExpires {
		if t, err := time.Parse(time.RFC3339, value); err == nil {
			return t.UTC().Format(expiresLayout)
		}
	}
	sum := sha256.Sum256([]byte(value))
	return "h" + hex.EncodeToString(sum[:20])
}

// objectLabels returns the Kubernetes labels and annotations that carry labels.
func objectLabels(l map[string]string) (map[string]string, map[string]string, error) {
	out := make(map[string]string, len(l))
	for k, v := range l {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, nil, fmt.Errorf("label key %q: %s: %w", k, strings.Join(errs, "; "), agentenv.ErrInvalid)
		}
		out[k] = labelValue(k, v)
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, nil, fmt.Errorf("labels: %w", err)
	}
	return out, map[string]string{AnnotationLabels: string(b)}, nil
}

// specLabels returns spec's labels with agentenv.expires always set (from Expires, else from
// the backstop deadline).
func specLabels(l map[string]string, expires time.Time) map[string]string {
	out := maps.Clone(l)
	if out == nil {
		out = map[string]string{}
	}
	if out[agentenv.LabelExpires] == "" {
		out[agentenv.LabelExpires] = expires.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	return out
}

// readLabels returns the agentenv label map of an object: the annotation when present and
// readable, else the Kubernetes labels as they are.
func readLabels(lbl, ann map[string]string) map[string]string {
	if s, ok := ann[AnnotationLabels]; ok {
		var m map[string]string
		if err := json.Unmarshal([]byte(s), &m); err == nil {
			return m
		}
	}
	return maps.Clone(lbl)
}

// selector returns a label selector for objects of ours carrying every one of want.
func selector(want map[string]string) (string, error) {
	sel := labels.NewSelector()
	req, err := labels.NewRequirement(agentenv.LabelRecord, selection.Exists, nil)
	if err != nil {
		return "", fmt.Errorf("selector: %w", err)
	}
	sel = sel.Add(*req)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		req, err := labels.NewRequirement(k, selection.Equals, []string{labelValue(k, want[k])})
		if err != nil {
			return "", fmt.Errorf("selector %s: %w: %w", k, agentenv.ErrInvalid, err)
		}
		sel = sel.Add(*req)
	}
	return sel.String(), nil
}
