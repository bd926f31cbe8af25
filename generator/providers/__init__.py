"""What kinstkit generates, per provider: template contexts and the files they render to.

- ``kinst``: the kinst provider module (portable core, table, FreeBSD glue) from a ``ProbePlan``;
- ``dtmalloc``: malloc-type discovery from a kernel and its modules, and the dtmalloc module;
- ``dscript``: ready-to-run D scripts, checked by ``dsyntax``;
- ``ciconfig``: CI recipes that build the modules for a list of FreeBSD releases.
"""
