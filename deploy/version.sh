#!/bin/sh
# The version sluice is stamped and packaged with: the nearest tag's
# `git describe` (v1.2.3, v1.2.3-4-gabc1234), else, before the first tag,
# 0.<commits>-g<hash>, so that packages built from later commits sort as
# newer (a bare hash would not); -dirty when the tree has changes.
if v=$(git describe --tags --dirty 2>/dev/null); then
	echo "$v"
elif n=$(git rev-list --count HEAD 2>/dev/null) && h=$(git rev-parse --short HEAD 2>/dev/null); then
	d=$(git diff --quiet HEAD 2>/dev/null || echo -dirty)
	echo "0.$n-g$h$d"
else
	echo devel
fi
