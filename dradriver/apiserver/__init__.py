"""The API server: where it is and how to reach it, the calls, claim status,
discovered devices and the ResourceSlices published from them."""
