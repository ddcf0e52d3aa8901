"""The node this process runs on: the GPU (NVML) and CPU identity the key is built from, the Pod's
environment, and Kubernetes Events about this Pod.
"""
