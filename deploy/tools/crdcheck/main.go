// crdcheck decodes Prometheus Operator resources (ServiceMonitor, PrometheusRule) strictly into
// the operator's own Go types: an unknown or misspelt field, or a value of the wrong type, is an
// error (exit 1). Plain Kubernetes kinds are checked by kubernetes-validate instead.
//
//	go run ./crdcheck ../k8s/servicemonitor.yaml ../k8s/prometheusrule.yaml
package main

import (
	"fmt"
	"os"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

func check(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return err
	}
	var target any
	switch meta.Kind {
	case "ServiceMonitor":
		target = &monitoringv1.ServiceMonitor{}
	case "PrometheusRule":
		target = &monitoringv1.PrometheusRule{}
	default:
		return fmt.Errorf("kind %q is not a Prometheus Operator resource", meta.Kind)
	}
	if err := yaml.UnmarshalStrict(data, target); err != nil {
		return err
	}
	fmt.Printf("%s: %s ok\n", path, meta.Kind)
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crdcheck FILE...")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
	}
}
