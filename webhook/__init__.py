"""gpu-policy: a Kubernetes admission webhook that keeps nvidia.com/gpu workloads honest."""

__version__ = "0.1.0"
