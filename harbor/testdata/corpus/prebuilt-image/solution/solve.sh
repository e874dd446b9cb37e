#!/bin/bash
mkdir -p /srv/out && echo ok > /srv/out/done
