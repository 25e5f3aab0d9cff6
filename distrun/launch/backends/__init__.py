"""Launcher backends: each turns a LaunchSpec into a Command and runs nothing."""
