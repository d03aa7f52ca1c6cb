"""Sans-I/O wire-protocol codecs over the neutral session core."""
