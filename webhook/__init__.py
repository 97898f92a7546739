"""gpu-policy: a Kubernetes admission webhook that keeps nvidia.com/gpu workloads honest."""
