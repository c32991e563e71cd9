"""The replica fetchers: how a follower broker copies its partitions from their leaders.

``ReplicaFetcherManager`` (``fetcher_manager``) runs ``num.replica.fetchers`` fetcher tasks per leader;
each (``replica_fetcher``) truncates (``truncation``: KIP-101/279, pure) and fetches with an incremental
fetch session (``fetch_session_handler``), keeping each partition's state (``fetch_state``). The broker
plugs in through the small interface of ``interface``; this package never imports ``broker``.
"""
