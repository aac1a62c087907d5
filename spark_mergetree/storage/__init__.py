"""Where part bytes live: plain directories, JBOD, and granule-level RAID0/1/5 over several disks."""
