package vercel

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/agentenv/agentenv"
)

// Vercel keeps at most five key-value tags on a sandbox (the SDK: "Maximum 5 tags"), and agentenv
// writes six labels or more. The record id needs no tag (it is the sandbox's name); the labels
// gc and teardown read or filter by get a tag each, and everything else rides in one packed tag:
//
//	agentenv.deployment  the deployment id (omitted when empty): the one server-side filter
//	                     a deployment's teardown lists by
//	agentenv.run         the run id (omitted when empty): the filter of a run's teardown
//	agentenv.owner       the creating process, read by gc
//	agentenv.expires     the expiry, read by gc
//	agentenv.labels      every other label, empty ones and the provider's own marks included,
//	                     as a URL query string ("agentenv.role=gateway&team=infra"), sorted
//
// agentenv.labels is also the mark of a sandbox agentenv made: List ignores sandboxes without it.
// Vercel does not document a length limit of a tag's value; this package refuses (ErrInvalid,
// before anything is sent) a tag value longer than MaxTagValue, its own bound.
const (
	tagLabels = "agentenv.labels"
	// MaxTagValue is the longest tag value this package sends.
	MaxTagValue = 256
	// maxTags is Vercel's limit of tags per sandbox.
	maxTags = 5
)

// ownTags are the labels that travel as tags of their own, when not empty.
var ownTags = []string{agentenv.LabelDeployment, agentenv.LabelRun, agentenv.LabelOwner, agentenv.LabelExpires}

// Labels the provider keeps for itself in agentenv.labels; List and Get drop them.
const (
	labelMode    = "agentenv.vercel.mode" // "vm" on a VM-mode sandbox
	labelCommand = "agentenv.vercel.cmd"  // the id of the command Create started
	modeVM       = "vm"
)

// encodeTags packs labels, less the record label (the sandbox's name), into at most five tags.
// A tag value longer than MaxTagValue is ErrInvalid naming it.
func encodeTags(labels map[string]string) (map[string]string, error) {
	rest := maps.Clone(labels)
	delete(rest, agentenv.LabelRecord)
	tags := map[string]string{}
	for _, k := range ownTags {
		if v := rest[k]; v != "" {
			tags[k] = v
			delete(rest, k)
		}
	}
	q := url.Values{}
	for k, v := range rest {
		q.Set(k, v)
	}
	tags[tagLabels] = q.Encode()
	for k, v := range tags {
		if len(v) > MaxTagValue {
			return nil, fmt.Errorf("tag %s would be %d characters, more than the %d this provider sends (labels %s): %w",
				k, len(v), MaxTagValue, strings.Join(slices.Sorted(maps.Keys(rest)), ", "), agentenv.ErrInvalid)
		}
	}
	if len(tags) > maxTags {
		return nil, fmt.Errorf("%d tags, Vercel keeps %d: %w", len(tags), maxTags, agentenv.ErrInvalid)
	}
	return tags, nil
}

// decodeTags returns the labels of the sandbox name tagged tags, with the provider's own marks
// (in own), and whether agentenv made it.
func decodeTags(name string, tags map[string]string) (labels, own map[string]string, ok bool) {
	packed, ok := tags[tagLabels]
	if !ok {
		return nil, nil, false
	}
	q, err := url.ParseQuery(packed)
	if err != nil {
		return nil, nil, false
	}
	labels, own = map[string]string{}, map[string]string{}
	for k, vs := range q {
		if strings.HasPrefix(k, "agentenv.vercel.") {
			own[k] = vs[0]
			continue
		}
		labels[k] = vs[0]
	}
	for _, k := range ownTags {
		if v, ok := tags[k]; ok {
			labels[k] = v
		}
	}
	labels[agentenv.LabelRecord] = name
	return labels, own, true
}
