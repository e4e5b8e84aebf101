"""Pieces every service uses."""
