"""The hostile-file corpus of issue 7 ("Tests and figures"): files no cache root should hold,
each placed in an otherwise valid cache and run against every command that reads it.

* :mod:`.craft` writes entry files byte by byte (any magic, version, length, header, body,
  checksum), independently of ``kcache.entry.encode``;
* :mod:`.corpus` is the list of hostile kinds (what is planted where);
* :mod:`.harness` builds one case (a copy of a real cache, the hostile file, canaries outside
  the root), runs one command in a subprocess under a time and address-space limit and
  records what it did;
* :mod:`.table` prints docs/hostile-files.md from those observations
  (``python -m tests.hostile.table > docs/hostile-files.md``).

The tests are tests/test_hostile_corpus.py.
"""
