"""The judge's parts, composed by ``relay.core.RelayCore`` (see each module's header)."""
