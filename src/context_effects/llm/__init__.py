"""The LLM execution layer shared by every study (docs/architecture.md, "The LLM execution layer").

``types``         the one request and result type (a request's key is its identity);
``shards``        request shards: what a study writes, what the answering rules read;
``runner``        store lookup, batching, re-asks under a reply policy, the ledger;
``replies``       reply policies: validate a reply, build its re-ask (one registry);
``judging``       the JSON-integer reply parser every judge reply goes through;
``store``         the content-addressed response store (and its CLI);
``ledger``, ``pricing``, ``secrets``   accounting, prices, API keys from the environment;
``retry``, ``concurrency``, ``async_bridge``   the hosted backends' retry policy,
                  adaptive concurrency and async-to-sync bridge;
``factory``       a model's config entry -> its ModelRef and backend;
``backends``      ``base`` (the Backend contract), ``hosted`` (shared driver of the
                  hosted APIs), ``openai_api``, ``anthropic_api``, ``vllm_engine``,
                  ``synthetic`` (shell; each study's simulator is in its package), ``replay``.

This package imports no study package; studies plug in through ``replies.POLICIES``
and ``backends.synthetic.SIMULATORS``, both imported only when used.
"""
