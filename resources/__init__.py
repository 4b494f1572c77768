"""The built-in resource plugins: numa, vgpu, sriov, disk."""
