"""Backbones, one file each. Every module here is imported by ``prism_rec.registry`` on first use."""
