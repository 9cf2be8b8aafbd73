"""The Linux dataplane driver: writers that reconcile the kernel with the rendered state."""
