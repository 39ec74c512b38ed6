"""What survives the process: allocation records, their store, CDI specs, the one atomic write."""
