"""``parc diff``'s report: the metrics compared (``metrics``), their values in words
(``values``), and one renderer per format: ``text``, ``markdown`` (a pull-request comment) and
``json``."""
