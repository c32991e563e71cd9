"""The controller: its own process role (``isrsim controller start``). A synchronous core decides
(``core``, ``elections``, ``state``, ``topics``); a trio shell (``controller``, ``channel_manager``) listens,
persists and sends the requests it batches (``request_batch``). The CLI reaches it through ``broker``'s
front door (``ControllerConfig``, ``run_controller``)."""
