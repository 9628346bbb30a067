"""The five-host lab: providers (systemd-nspawn, Vagrant), its CLI and the zone-loss drills."""
