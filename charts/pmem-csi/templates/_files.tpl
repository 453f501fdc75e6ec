{{/*
The object files of one kustomization under manifests/ (files/ in the
chart), in its order, bases expanded: a JSON list of paths relative to
files/. Called with (dict "root" $ "dir" "distributed").
*/}}
{{- define "pmem-csi.kustomization" -}}
{{- $root := .root -}}
{{- $k := $root.Files.Get (printf "files/%s/kustomization.yaml" .dir) | fromYaml -}}
{{- if not $k.resources -}}
{{- fail (printf "files/%s/kustomization.yaml: no resources (is files/ the link to manifests/?)" .dir) -}}
{{- end -}}
{{- $out := list -}}
{{- range $r := $k.resources -}}
{{- $p := clean (printf "%s/%s" $.dir $r) -}}
{{- if hasSuffix ".yaml" $r -}}
{{- $out = append $out $p -}}
{{- else -}}
{{- $out = concat $out (include "pmem-csi.kustomization" (dict "root" $root "dir" $p) | fromJsonArray) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
Every object file the values ask for, in the order kubectl applies them.
*/}}
{{- define "pmem-csi.files" -}}
{{- $v := .Values -}}
{{- $files := include "pmem-csi.kustomization" (dict "root" . "dir" $v.mode) | fromJsonArray -}}
{{- if and (eq $v.mode "central") (eq $v.certificates "cert-manager") -}}
{{- $files = concat $files (include "pmem-csi.kustomization" (dict "root" . "dir" "certs/cert-manager") | fromJsonArray) -}}
{{- end -}}
{{- if $v.storageClasses.enabled -}}
{{- $files = concat $files (include "pmem-csi.kustomization" (dict "root" . "dir" "storageclass") | fromJsonArray) -}}
{{- end -}}
{{- if $v.storageClasses.cache -}}{{- $files = append $files "storageclass/pmem-csi-sc-cache.yaml" -}}{{- end -}}
{{- if $v.storageClasses.cxl -}}{{- $files = append $files "storageclass/pmem-csi-sc-cxl.yaml" -}}{{- end -}}
{{- if $v.storageClasses.keepData -}}{{- $files = append $files "storageclass/pmem-csi-vac-keep-data.yaml" -}}{{- end -}}
{{- if $v.snapshots -}}
{{- $files = concat $files (include "pmem-csi.kustomization" (dict "root" . "dir" "snapshot") | fromJsonArray) -}}
{{- end -}}
{{- if $v.podMonitor -}}
{{- $files = concat $files (include "pmem-csi.kustomization" (dict "root" . "dir" "metrics") | fromJsonArray) -}}
{{- end -}}
{{- if not $v.networkPolicies -}}
{{- $keep := list -}}
{{- range $f := $files -}}
{{- if not (hasPrefix "networkpolicy" (base $f)) -}}{{- $keep = append $keep $f -}}{{- end -}}
{{- end -}}
{{- $files = $keep -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}
