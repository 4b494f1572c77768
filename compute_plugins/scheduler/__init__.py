"""Scheduler side: which hosts have room (:mod:`.providers`), every
plugin's fit on each one's published host states (:mod:`.fitting`), the
weighers, the allocation written to Placement (:mod:`.allocation`) and the
selection that offers the decision to the host (:mod:`.selection`);
:mod:`.query` is ``validate``'s preview of the equivalent
allocation-candidates query."""
