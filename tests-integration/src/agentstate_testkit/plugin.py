"""Pytest plugin: server fixtures."""
