#!/bin/sh
# Idempotent: every revision runs it once.
mkdir -p /data && echo 1 > /data/schema-version
