"""The engine core: the speculative loop and its parts (drafters, sampling and the accept
rule, schedules, events, top-k recording, detokenizing). Token ids only; it imports no
source, no analysis and no front end."""
