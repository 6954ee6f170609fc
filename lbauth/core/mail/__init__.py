"""Mail (contract 18): the outbox that requests write to, and what its messages say."""
