"""The authorization endpoint (RFC 6749 3.1): the request (request.py), the interaction policy
(policy.py), the decisions (decisions.py), the code (codes.py), and the chain that joins them
(endpoint.py)."""
