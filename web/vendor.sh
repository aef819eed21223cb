#!/bin/sh
# Refreshes web/vendor/ from npm: the drawing libraries of the web view, pinned by
# package-lock.json. Run by hand after changing package.json; the result is committed, so
# building or installing probing never needs Node or the network.
set -eu
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --ignore-scripts
rm -rf vendor && mkdir -p vendor
cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css vendor/
cp node_modules/uplot/LICENSE vendor/LICENSE.uplot
cp node_modules/d3-flame-graph/dist/d3-flamegraph.min.js \
   node_modules/d3-flame-graph/dist/d3-flamegraph.css vendor/
cp node_modules/d3-flame-graph/LICENSE vendor/LICENSE.d3-flame-graph
cp node_modules/d3-selection/dist/d3-selection.min.js vendor/
cp node_modules/d3-selection/LICENSE vendor/LICENSE.d3
# d3-flamegraph.min.js bundles the d3 modules it uses (d3-hierarchy, d3-scale, ...; ISC, as
# d3-selection, which the page uses to hand it its element)
printf 'uplot %s\nd3-flame-graph %s\nd3-selection %s\n' \
  "$(node -p 'require("./node_modules/uplot/package.json").version')" \
  "$(node -p 'require("./node_modules/d3-flame-graph/package.json").version')" \
  "$(node -p 'require("./node_modules/d3-selection/package.json").version')" > vendor/VERSIONS
