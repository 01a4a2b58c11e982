package certs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// apiServiceGVR is kube-aggregator's APIService, reached through the dynamic
// client so the operator needs no aggregator clientset.
var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// KeyCAConfigMap is the CA ConfigMap's key, as in kube-root-ca.crt.
const KeyCAConfigMap = "ca.crt"

// publish writes bundle where clients read it: the APIService's caBundle and
// the CA ConfigMap, each only when it differs. A missing APIService is not an
// error (it may be applied after the operator starts): the next resync sets
// it.
func (m *Manager) publish(ctx context.Context, bundle []byte) error {
	return errors.Join(m.publishAPIService(ctx, bundle), m.publishConfigMap(ctx, bundle))
}

func (m *Manager) publishAPIService(ctx context.Context, bundle []byte) error {
	if m.opts.APIService == "" {
		return nil
	}
	apiServices := m.deps.Dynamic.Resource(apiServiceGVR)
	obj, err := apiServices.Get(ctx, m.opts.APIService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		log.FromContext(ctx).Info("APIService not found yet; its caBundle is set once it exists", "apiService", m.opts.APIService)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading APIService %s: %w", m.opts.APIService, err)
	}
	if have, _, _ := unstructured.NestedString(obj.Object, "spec", "caBundle"); have != "" {
		if b, err := base64.StdEncoding.DecodeString(have); err == nil && bytes.Equal(b, bundle) {
			return nil
		}
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"caBundle": base64.StdEncoding.EncodeToString(bundle)}})
	if err != nil {
		return err
	}
	if _, err := apiServices.Patch(ctx, m.opts.APIService, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting APIService %s caBundle: %w", m.opts.APIService, err)
	}
	log.FromContext(ctx).Info("APIService caBundle set", "apiService", m.opts.APIService)
	return nil
}

func (m *Manager) publishConfigMap(ctx context.Context, bundle []byte) error {
	if m.opts.CAConfigMap == "" {
		return nil
	}
	cms := m.deps.Kube.CoreV1().ConfigMaps(m.ns)
	cm, err := cms.Get(ctx, m.opts.CAConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: m.opts.CAConfigMap, Namespace: m.ns, Labels: map[string]string{ManagedByLabel: managedBy}},
			Data:       map[string]string{KeyCAConfigMap: string(bundle)},
		}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ConfigMap %s/%s: %w", m.ns, m.opts.CAConfigMap, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", m.ns, m.opts.CAConfigMap, err)
	}
	if cm.Data[KeyCAConfigMap] == string(bundle) {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[KeyCAConfigMap] = string(bundle)
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating ConfigMap %s/%s: %w", m.ns, m.opts.CAConfigMap, err)
	}
	return nil
}
