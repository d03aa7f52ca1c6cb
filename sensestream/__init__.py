"""SenseStream for its users: the `sensestream` command and the protocol-v1 client."""
