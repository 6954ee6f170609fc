"""Apps that register themselves (contract section 17): RFC 7591 dynamic registration with RFC 7592
read and delete (`dynamic`), and client ID metadata documents, whose URL is the client id
(draft-ietf-oauth-client-id-metadata-document-01, `documents`)."""
