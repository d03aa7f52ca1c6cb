"""Engines elsewhere: the gateway's client of remote replicas, the replica, and Ray Serve."""
