"""Scheduler side: allocation-candidate query, filters, selection."""
