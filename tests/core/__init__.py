"""Tests for tokenmill.core."""
