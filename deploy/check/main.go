// Command check reads Kubernetes manifests (a multi-document YAML stream on stdin, as
// `helm template` prints it) and decodes each document strictly into the Kubernetes API's
// own Go types (k8s.io/api; the Prometheus Operator's for ServiceMonitor and PrometheusRule):
// an unknown field, a wrong type or an unknown kind is an error naming the document. It then
// checks what the API server would refuse and the types cannot say: names and labels that are
// not DNS labels, selectors that do not match the pod template, ports named in probes but not
// declared. Exit 0 when every document holds, else 1 with one line per problem.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

type meta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

func main() {
	data, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, "check: read stdin:", err)
		os.Exit(1)
	}
	var problems []string
	n := 0
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		n++
		for _, p := range check(doc) {
			problems = append(problems, fmt.Sprintf("document %d: %s", i+1, p))
		}
	}
	if n == 0 {
		problems = append(problems, "no document on stdin")
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("%d documents valid\n", n)
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func check(doc []byte) []string {
	var m meta
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return []string{"not YAML: " + err.Error()}
	}
	strict := func(into interface{}) []string {
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return []string{fmt.Sprintf("%s %s: %v", m.APIVersion, m.Kind, err)}
		}
		return nil
	}
	switch m.APIVersion + " " + m.Kind {
	case "apps/v1 DaemonSet":
		var d appsv1.DaemonSet
		if p := strict(&d); p != nil {
			return p
		}
		return daemonSet(&d)
	case "v1 Service":
		var s corev1.Service
		if p := strict(&s); p != nil {
			return p
		}
		return names(s.Name, s.Labels)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		var s monv1.ServiceMonitor
		if p := strict(&s); p != nil {
			return p
		}
		return names(s.Name, s.Labels)
	case "monitoring.coreos.com/v1 PrometheusRule":
		var r monv1.PrometheusRule
		if p := strict(&r); p != nil {
			return p
		}
		if len(r.Spec.Groups) == 0 {
			return []string{"PrometheusRule without groups"}
		}
		return names(r.Name, r.Labels)
	}
	return []string{fmt.Sprintf("unknown kind %q %q", m.APIVersion, m.Kind)}
}

func names(name string, labels map[string]string) []string {
	var p []string
	for _, e := range validation.IsDNS1123Subdomain(name) {
		p = append(p, fmt.Sprintf("name %q: %s", name, e))
	}
	for k, v := range labels {
		for _, e := range validation.IsQualifiedName(k) {
			p = append(p, fmt.Sprintf("label key %q: %s", k, e))
		}
		for _, e := range validation.IsValidLabelValue(v) {
			p = append(p, fmt.Sprintf("label %q value %q: %s", k, v, e))
		}
	}
	return p
}

func daemonSet(d *appsv1.DaemonSet) []string {
	p := names(d.Name, d.Labels)
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 {
		return append(p, "DaemonSet without a selector")
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			p = append(p, fmt.Sprintf("selector %s=%s does not match the pod template's labels", k, v))
		}
	}
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return append(p, "DaemonSet without containers")
	}
	vols := map[string]bool{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = true
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		ports := map[string]bool{}
		for _, cp := range c.Ports {
			ports[cp.Name] = true
			for _, e := range validation.IsValidPortName(cp.Name) {
				p = append(p, fmt.Sprintf("container %s port %q: %s", c.Name, cp.Name, e))
			}
		}
		if pr := c.ReadinessProbe; pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Port.StrVal != "" && !ports[pr.HTTPGet.Port.StrVal] {
			p = append(p, fmt.Sprintf("container %s: readiness probe port %q is not declared", c.Name, pr.HTTPGet.Port.StrVal))
		}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				p = append(p, fmt.Sprintf("container %s mounts volume %q, which is not declared", c.Name, m.Name))
			}
		}
		if c.Image == "" || strings.HasSuffix(c.Image, ":") {
			p = append(p, fmt.Sprintf("container %s: image %q has no tag", c.Name, c.Image))
		}
	}
	return p
}
