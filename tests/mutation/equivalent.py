"""Surviving mutants judged equivalent: no input tells them from the code as written.

Each entry is a mutant's stable id (`./dev mutate` prints it) and the reason. An entry whose
statement or function has changed no longer matches (its digest differs), and the mutant is
then counted again until someone looks at it afresh.
"""

from __future__ import annotations

# The page of one thread (or one namespace) orders by (checkpoint_id, thread_id, checkpoint_ns)
# as the page of every thread does, for one cursor shape; its WHERE fixes the thread (and the
# namespace) by equality, so the order of those terms, or their presence, changes no row.
_THREAD_FIXED = "ORDER BY term on thread_id, which the WHERE fixes (thread_id = :thread_id)"
_NS_FIXED = "ORDER BY term on checkpoint_ns, which the WHERE fixes (checkpoint_ns = :checkpoint_ns)"

EQUIVALENT: dict[str, str] = {
    "sql:SELECT_PAGE_THREAD_NS:67c2c4f3f2": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_THREAD_NS:4f9725cf19": _THREAD_FIXED,  # swap-dir
    "sql:SELECT_PAGE_THREAD_NS:c9525f64b2": _NS_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_THREAD_NS:562196cf5b": _NS_FIXED,  # swap-dir
    "sql:SELECT_PAGE_THREAD:bc6e33b630": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_THREAD:94b8312248": _THREAD_FIXED,  # swap-dir
    "sql:SELECT_PAGE_THREAD_NS_FILTERED:01652dc05a": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_THREAD_NS_FILTERED:8a2f4f6bf5": _THREAD_FIXED,  # swap-dir
    "sql:SELECT_PAGE_THREAD_NS_FILTERED:b24a686f02": _NS_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_THREAD_NS_FILTERED:96d5d4f28e": _NS_FIXED,  # swap-dir
    "sql:SELECT_PAGE_THREAD_FILTERED:eb9411f524": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_THREAD_FILTERED:0715a22e82": _THREAD_FIXED,  # swap-dir
    "sql:SELECT_PAGE_DELTA_THREAD_NS:c04a126f5e": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_DELTA_THREAD_NS:616adc9fef": _THREAD_FIXED,  # swap-dir
    "sql:SELECT_PAGE_DELTA_THREAD_NS:71dc9583e5": _NS_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_DELTA_THREAD_NS:aa1159209a": _NS_FIXED,  # swap-dir
    "sql:SELECT_PAGE_DELTA_THREAD:f42c2bf95b": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_DELTA_THREAD:6d1d77cfef": _THREAD_FIXED,  # swap-dir
    "sql:SELECT_PAGE_DELTA_THREAD_NS_FILTERED:666efcf14f": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_DELTA_THREAD_NS_FILTERED:23adb2e1bc": _THREAD_FIXED,  # swap-dir
    "sql:SELECT_PAGE_DELTA_THREAD_NS_FILTERED:003d5ff145": _NS_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_DELTA_THREAD_NS_FILTERED:a1b5660187": _NS_FIXED,  # swap-dir
    "sql:SELECT_PAGE_DELTA_THREAD_FILTERED:05a9ae7762": _THREAD_FIXED,  # drop-order-term
    "sql:SELECT_PAGE_DELTA_THREAD_FILTERED:d06b9ba488": _THREAD_FIXED,  # swap-dir
}
