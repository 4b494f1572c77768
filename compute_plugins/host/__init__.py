"""Host discovery: libvirt, udev and recorded host snapshots."""
