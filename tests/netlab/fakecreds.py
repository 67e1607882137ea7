"""The fake secrets handed out by the lab's metadata service. Tests look for
these strings to detect that a sandbox reached (or leaked) the credential."""
METADATA_ACCESS_KEY = "ASIANETLABFAKE0000001"
METADATA_SECRET = "netlab-FAKE-secret-do-not-use-0123456789abcdef"
METADATA_TOKEN = "netlab-fake-imds-session-token"
METADATA_ROLE = "netlab-role"
