"""The lab agent: runs on a lab host, reports its facts and runs fio on declared devices."""
