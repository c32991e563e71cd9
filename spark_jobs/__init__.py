"""The PySpark consistency report (``isrsim report``, or ``python -m spark_jobs.report_job``); its entry
point is ``spark_jobs.report_job.run_report``. Reads broker files through ``broker``'s and ``protocol``'s
front doors."""
