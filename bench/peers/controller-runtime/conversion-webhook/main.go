// Command conversion-webhook is the controller-runtime peer of the setpoint conversion
// benchmark (bench/conversion/run.py). It serves /convert for the tenants example's Tenant
// kind: v1 is the hub (Hub()), v1alpha1 a spoke with ConvertTo/ConvertFrom, exactly the
// mapping of examples/tenants/tenants/api.py, written the way the kubebuilder book writes
// converters.
//
// Like setpoint (and cluster-api's utilconversion.MarshalData), a down-conversion keeps the
// hub's data in the setpoint.dev/conversion-data annotation and an up-conversion restores
// what v1alpha1 cannot hold (containerDefaults) from it, so both webhooks do the same work.
//
// The server is controller-runtime's webhook.Server (HTTPS, certificates from -cert-dir)
// with conversion.NewWebhookHandler, started without a manager; the driver waits until the
// port accepts connections. SIGTERM stops it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	webhookconversion "sigs.k8s.io/controller-runtime/pkg/webhook/conversion"
)

const group = "tenants.setpoint.dev"

// conversionDataAnnotation holds the hub's data on spoke objects (setpoint's name for it).
const conversionDataAnnotation = "setpoint.dev/conversion-data"

var (
	v1         = schema.GroupVersion{Group: group, Version: "v1"}
	v1alpha1GV = schema.GroupVersion{Group: group, Version: "v1alpha1"}
)

// TenantQuota is v1's quota per namespace.
type TenantQuota struct {
	CPU    *intstr.IntOrString `json:"cpu,omitempty"`
	Memory *intstr.IntOrString `json:"memory,omitempty"`
	Pods   *int64              `json:"pods,omitempty"`
}

// ContainerDefaults is v1's default container limits (v1alpha1 has none).
type ContainerDefaults struct {
	CPU    *intstr.IntOrString `json:"cpu,omitempty"`
	Memory *intstr.IntOrString `json:"memory,omitempty"`
}

// TenantSpec is v1's spec.
type TenantSpec struct {
	Namespaces        []string           `json:"namespaces"`
	AdminGroup        string             `json:"adminGroup"`
	Quota             *TenantQuota       `json:"quota,omitempty"`
	ContainerDefaults *ContainerDefaults `json:"containerDefaults,omitempty"`
	Isolated          *bool              `json:"isolated,omitempty"`
}

// Tenant is the hub (v1, the storage version).
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TenantSpec            `json:"spec"`
	Status            *runtime.RawExtension `json:"status,omitempty"`
}

// TenantList is a list of v1 Tenants.
type TenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tenant `json:"items"`
}

// TenantSpecV1Alpha1 is v1alpha1's spec: flat quota fields and a network mode.
type TenantSpecV1Alpha1 struct {
	Namespaces  []string            `json:"namespaces"`
	Admins      string              `json:"admins"`
	CPUQuota    *intstr.IntOrString `json:"cpuQuota,omitempty"`
	MemoryQuota *intstr.IntOrString `json:"memoryQuota,omitempty"`
	PodQuota    *int64              `json:"podQuota,omitempty"`
	Network     string              `json:"network,omitempty"`
}

// TenantV1Alpha1 is the spoke.
type TenantV1Alpha1 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TenantSpecV1Alpha1    `json:"spec"`
	Status            *runtime.RawExtension `json:"status,omitempty"`
}

// TenantV1Alpha1List is a list of v1alpha1 Tenants.
type TenantV1Alpha1List struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantV1Alpha1 `json:"items"`
}

// Hub marks v1 as the hub.
func (*Tenant) Hub() {}

// ConvertTo converts this v1alpha1 Tenant to the hub, restoring what v1alpha1 cannot hold.
func (src *TenantV1Alpha1) ConvertTo(dstRaw conversion.Hub) error {
	dst := dstRaw.(*Tenant)
	dst.ObjectMeta = src.ObjectMeta
	isolated := src.Spec.Network != "Open"
	dst.Spec = TenantSpec{
		Namespaces: src.Spec.Namespaces,
		AdminGroup: src.Spec.Admins,
		Quota:      &TenantQuota{CPU: src.Spec.CPUQuota, Memory: src.Spec.MemoryQuota, Pods: src.Spec.PodQuota},
		Isolated:   &isolated,
	}
	dst.Status = src.Status
	if data, ok := src.Annotations[conversionDataAnnotation]; ok {
		var stored struct {
			Spec TenantSpec `json:"spec"`
		}
		if err := json.Unmarshal([]byte(data), &stored); err != nil {
			return fmt.Errorf("annotation %s: %w", conversionDataAnnotation, err)
		}
		dst.Spec.ContainerDefaults = stored.Spec.ContainerDefaults
		annotations := make(map[string]string, len(src.Annotations))
		for k, v := range src.Annotations {
			if k != conversionDataAnnotation {
				annotations[k] = v
			}
		}
		if len(annotations) == 0 {
			annotations = nil
		}
		dst.Annotations = annotations
	}
	return nil
}

// ConvertFrom converts the hub to this v1alpha1 Tenant, keeping the hub's data.
func (dst *TenantV1Alpha1) ConvertFrom(srcRaw conversion.Hub) error {
	src := srcRaw.(*Tenant)
	dst.ObjectMeta = src.ObjectMeta
	network := "Isolated"
	if src.Spec.Isolated != nil && !*src.Spec.Isolated {
		network = "Open"
	}
	dst.Spec = TenantSpecV1Alpha1{
		Namespaces: src.Spec.Namespaces,
		Admins:     src.Spec.AdminGroup,
		Network:    network,
	}
	if q := src.Spec.Quota; q != nil {
		dst.Spec.CPUQuota, dst.Spec.MemoryQuota, dst.Spec.PodQuota = q.CPU, q.Memory, q.Pods
	}
	dst.Status = src.Status
	data, err := json.Marshal(struct {
		Spec   TenantSpec            `json:"spec"`
		Status *runtime.RawExtension `json:"status,omitempty"`
	}{src.Spec, src.Status})
	if err != nil {
		return err
	}
	annotations := make(map[string]string, len(src.Annotations)+1)
	for k, v := range src.Annotations {
		annotations[k] = v
	}
	annotations[conversionDataAnnotation] = string(data)
	dst.Annotations = annotations
	return nil
}

// Deep copies, written by hand (through JSON) instead of generated by controller-gen: the
// webhook only copies objects when the scheme asks, not on the conversion path measured.
func deepCopyJSON[T any](in *T) *T {
	if in == nil {
		return nil
	}
	data, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		panic(err)
	}
	return out
}

// DeepCopyObject returns an independent copy.
func (t *Tenant) DeepCopyObject() runtime.Object { return deepCopyJSON(t) }

// DeepCopyObject returns an independent copy.
func (t *TenantList) DeepCopyObject() runtime.Object { return deepCopyJSON(t) }

// DeepCopyObject returns an independent copy.
func (t *TenantV1Alpha1) DeepCopyObject() runtime.Object { return deepCopyJSON(t) }

// DeepCopyObject returns an independent copy.
func (t *TenantV1Alpha1List) DeepCopyObject() runtime.Object { return deepCopyJSON(t) }

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 9443, "port to listen on")
	certDir := flag.String("cert-dir", "", "directory with tls.crt and tls.key")
	flag.Parse()
	// Info level, as the setpoint side logs: errors and warnings, nothing per request.
	ctrllog.SetLogger(zap.New(zap.UseDevMode(false)))

	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(v1, &Tenant{}, &TenantList{})
	// Both versions' Go types are named apart, but the kind is Tenant at every version.
	scheme.AddKnownTypeWithName(v1alpha1GV.WithKind("Tenant"), &TenantV1Alpha1{})
	scheme.AddKnownTypeWithName(v1alpha1GV.WithKind("TenantList"), &TenantV1Alpha1List{})
	metav1.AddToGroupVersion(scheme, v1)
	metav1.AddToGroupVersion(scheme, v1alpha1GV)

	server := webhook.NewServer(webhook.Options{Host: *host, Port: *port, CertDir: *certDir})
	server.Register("/convert", webhookconversion.NewWebhookHandler(scheme, webhookconversion.NewRegistry()))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
