# proxy/sigv4: SigV4 re-signing (issue 9)
