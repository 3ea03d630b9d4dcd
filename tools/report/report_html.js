/* The tptrace report page: draws the report object embedded in #report-data
 * (docs/report-schema.md) as tables and inline SVG plots. Hand-written, no library, nothing
 * fetched: the page is one file that opens offline. Every part of the report is optional here
 * (no --gpu, no steps, no findings): a missing part says why it is missing instead of being
 * drawn as zeros, and a null number with a "<key>_unknown" sibling reads "unknown (why)".
 * Plots carry data-plot and data-* counts so the browser test can check what was drawn.
 * This file is compiled into tptrace as a C string (tools/tools.mk): it must not contain the
 * closing tag of a script element. */
(function () {
	'use strict';

	var SVGNS = 'http://www.w3.org/2000/svg';
	var SERIES = ['#2e86c1', '#c0392b', '#27ae60', '#8e44ad', '#d68910', '#16a085', '#7f8c8d',
		      '#e84393', '#2c3e50', '#b7950b'];
	var KINDS = [['compute_ns', 'compute', '#2e86c1'], ['comm_ns', 'communication', '#8e44ad'],
		     ['copy_ns', 'copy', '#d68910'], ['memset_ns', 'memset', '#16a085'],
		     ['gpu_idle_ns', 'GPU idle', '#d5d8dc']];
	var W = 960;		/* every plot's viewBox width; CSS scales it to the page */

	var report = JSON.parse(document.getElementById('report-data').textContent);
	var app = document.getElementById('app');

	/* ---- DOM */
	function setAttrs(e, attrs) {
		for (var k in attrs) {
			var v = attrs[k];
			if (v === undefined || v === null)
				continue;
			if (k === 'text')
				e.textContent = String(v);
			else
				e.setAttribute(k, String(v));
		}
	}
	function append(e, kids) {
		if (kids === undefined || kids === null)
			return;
		if (!Array.isArray(kids))
			kids = [kids];
		kids.forEach(function (k) {
			if (k === null || k === undefined || k === false)
				return;
			/* text always as text nodes: names from the trace are never parsed as HTML */
			e.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
		});
	}
	function h(tag, attrs, kids) {
		var e = document.createElement(tag);
		setAttrs(e, attrs || {});
		append(e, kids);
		return e;
	}
	function s(tag, attrs, kids) {
		var e = document.createElementNS(SVGNS, tag);
		setAttrs(e, attrs || {});
		append(e, kids);
		return e;
	}
	function tip(text) {
		return s('title', {}, text);
	}

	/* ---- values */
	function isNum(x) {
		return typeof x === 'number' && isFinite(x);
	}
	function arr(x) {
		return Array.isArray(x) ? x : [];
	}
	function obj(x) {
		return x && typeof x === 'object' && !Array.isArray(x) ? x : null;
	}
	/* why o[key] is not known: its "<key>_unknown" sibling */
	function whyUnknown(o, key) {
		var w = o ? o[key + '_unknown'] : null;
		return typeof w === 'string' && w ? w : null;
	}
	function unknownText(o, key) {
		var w = whyUnknown(o, key);
		return w ? 'unknown (' + w + ')' : 'unknown';
	}
	function isUnknown(o, key) {
		return !!o && (o[key] === null || (o[key] === undefined && !!whyUnknown(o, key)));
	}
	function fix(x) {
		var a = Math.abs(x);
		return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(2);
	}
	function fmtNs(ns) {
		if (!isNum(ns))
			return String(ns);
		var a = Math.abs(ns);
		if (a < 1e3)
			return ns.toFixed(0) + ' ns';
		if (a < 1e6)
			return fix(ns / 1e3) + ' µs';
		if (a < 1e9)
			return fix(ns / 1e6) + ' ms';
		return fix(ns / 1e9) + ' s';
	}
	function fmtCount(n) {
		if (!isNum(n))
			return String(n);
		return Number.isInteger(n) ? n.toLocaleString('en-US') : fix(n);
	}
	function fmtPct(f) {
		return isNum(f) ? fix(f * 100) + ' %' : String(f);
	}
	function fmtBytes(b) {
		if (!isNum(b))
			return String(b);
		var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
		while (Math.abs(b) >= 1024 && i < units.length - 1) {
			b /= 1024;
			i++;
		}
		return (i ? fix(b) : b.toFixed(0)) + ' ' + units[i];
	}
	/* a finding's number, formatted by what its key says it is */
	function fmtByKey(key, v) {
		if (typeof v === 'boolean')
			return v ? 'yes' : 'no';
		if (!isNum(v))
			return String(v);
		if (/^(pid|tid|rank|device|stream|slow_rank)$/.test(key))
			return String(v);
		if (/(^|_)gbps$/.test(key))
			return fix(v) + ' GB/s';
		if (/(^|_)ns($|_)/.test(key))
			return fmtNs(v);
		if (/bytes_per_s$|_bps$|bandwidth/.test(key))
			return fmtBytes(v) + '/s';
		if (/bytes/.test(key))
			return fmtBytes(v);
		if (/(share|frac|fraction)$/.test(key))
			return fmtPct(v);
		if (/(_pct|percent)$/.test(key))
			return fix(v) + ' %';
		if (/per_s$/.test(key))
			return fix(v) + '/s';
		return fmtCount(v);
	}
	function plain(v) {
		return String(v);
	}
	function fmtAny(v) {
		if (typeof v === 'boolean')
			return v ? 'yes' : 'no';
		return isNum(v) ? fmtCount(v) : String(v);
	}

	/* Timestamps are on the traces' monotonic clock, meaningless to a reader: shown from the
	 * first step or utilization bin of the report (the raw value is the cell's title). */
	var T0 = (function () {
		var t = Infinity;
		function see(v) { if (isNum(v) && v < t) t = v; }
		var tl = obj(report.timeline), st = obj(report.steps);
		arr(tl && tl.utilization).forEach(function (d) { if (obj(d)) see(d.start_ns); });
		arr(st && st.per_rank).forEach(function (r) {
			if (obj(r)) arr(r.steps).forEach(function (x) { if (obj(x)) see(x.start_ns); });
		});
		arr(report.findings).forEach(function (f) {
			if (obj(f)) arr(f.evidence).forEach(function (e) { if (obj(e)) see(e.ts_ns); });
		});
		return t === Infinity ? 0 : t;
	})();
	function fmtAt(ts) {
		return isNum(ts) ? '+' + fmtNs(ts - T0) : String(ts);
	}

	/* a table cell for o[key]: the value, "unknown (why)" for null, a dash when absent */
	function cell(o, key, fmt, num) {
		var cls = num ? 'num' : '';
		if (isUnknown(o, key))
			return h('td', { class: cls + ' unknown', 'data-unknown': key }, unknownText(o, key));
		var v = o ? o[key] : undefined;
		if (v === undefined)
			return h('td', { class: cls }, '—');
		return h('td', { class: cls, title: String(v) }, (fmt || fmtAny)(v));
	}
	function table(cols, rows, attrs) {
		/* cols: [header, key, fmt, numeric, what a bare null means (default: unknown)] */
		return h('table', attrs, [
			h('thead', {}, h('tr', {}, cols.map(function (c) {
				return h('th', { class: c[3] ? 'num' : '' }, c[0]);
			}))),
			h('tbody', {}, rows.map(function (r) {
				return h('tr', {}, cols.map(function (c) {
					var td = c[4] && r[c[1]] === null && !whyUnknown(r, c[1]) ?
						h('td', { class: 'unknown' }, c[4]) : cell(r, c[1], c[2], c[3]);
					if (c[1] === 'name')
						td.className += ' name';
					return td;
				}));
			}))
		]);
	}
	function absent(parent, plot, why) {
		parent.appendChild(h('p', { class: 'absent', 'data-absent': plot }, why));
	}
	/* why the GPU plots are missing: a "<key>_unknown" in the report, a GPU item of
	 * cannot_judge, or inputs recorded without --gpu */
	function gpuWhy(o, key) {
		var w = whyUnknown(o, key) || whyUnknown(report, 'timeline');
		if (w)
			return w;
		var cj = arr(report.cannot_judge).filter(function (c) {
			return c && /gpu|kernel|utili|idle/i.test(String(c.what || ''));
		});
		if (cj.length && cj[0].why)
			return String(cj[0].why);
		var inputs = arr(report.inputs);
		if (inputs.length && inputs.every(function (i) { return i && i.gpu === false; }))
			return 'no --gpu data in the traces (record with tptrace --gpu to get GPU records)';
		return null;
	}
	function label(d) {
		return d === null || d === undefined ? '?' : String(d);
	}
	/* "rank 0, device 1": devices are numbered per process, so the process says whose */
	function devName(d) {
		var whose = isNum(d.rank) ? 'rank ' + d.rank + ', ' : isNum(d.pid) ? 'pid ' + d.pid + ', ' : '';
		return (whose ? whose + 'device ' : 'Device ') + label(d.device);
	}
	/* "rank 3", or the pid where the rank is unknown */
	function who(r) {
		return isNum(r.rank) ? 'rank ' + r.rank : 'pid ' + label(r.pid);
	}

	/* ---- axes */
	function niceStep(max, n) {
		var raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
		return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
	}
	function yAxis(g, box, max, fmt) {
		var step = niceStep(max, 4);
		for (var v = 0; v <= max * 1.0001; v += step) {
			var y = box.y(v);
			g.appendChild(s('line', { class: 'grid', x1: box.l, x2: box.r, y1: y, y2: y }));
			g.appendChild(s('text', { x: box.l - 6, y: y + 4, 'text-anchor': 'end' }, fmt(v)));
		}
		g.appendChild(s('line', { class: 'axis', x1: box.l, x2: box.l, y1: box.t, y2: box.b }));
		g.appendChild(s('line', { class: 'axis', x1: box.l, x2: box.r, y1: box.b, y2: box.b }));
	}
	/* the left margin a y axis from 0 to max needs: its widest label (11px text, under 7px a
	 * character) right-aligned 6px from the axis; never under min */
	function axisLeft(max, fmt, min) {
		var step = niceStep(max, 4), n = 0;
		for (var v = 0; v <= max * 1.0001; v += step)
			n = Math.max(n, String(fmt(v)).length);
		return Math.max(min, 12 + 7 * n);
	}
	function svgBox(height, left, attrs) {
		var box = { l: left, r: W - 12, t: 18, b: height - 26 };
		var el = s('svg', Object.assign({ class: 'plot', viewBox: '0 0 ' + W + ' ' + height,
						  role: 'img' }, attrs));
		return { svg: el, box: box };
	}

	/* ---- sections */
	function section(title, id, fn) {
		var sec = h('section', { id: id }, h('h2', {}, title));
		app.appendChild(sec);
		try {
			fn(sec);
		} catch (e) {
			/* one broken part must not hide the others; still counted as a page error */
			window.__tptraceErrors = window.__tptraceErrors || [];
			window.__tptraceErrors.push(id + ': ' + e.message);
			document.documentElement.setAttribute('data-js-errors', window.__tptraceErrors.length);
			sec.appendChild(h('p', { class: 'js-error' }, 'This part failed to render: ' + e.message));
			console.error('tptrace report: ' + id + ': ' + (e.stack || e));
		}
	}

	function header() {
		var inputs = arr(report.inputs);
		var ranks = inputs.filter(function (i) { return i && isNum(i.rank); }).length;
		var nf = arr(report.findings).length;
		app.appendChild(h('h1', {}, 'tptrace report'));
		app.appendChild(h('p', { class: 'sub' }, [
			inputs.length + ' trace' + (inputs.length === 1 ? '' : 's'),
			ranks ? ' (' + ranks + ' with a rank)' : '',
			' · ' + (nf ? nf + ' finding' + (nf === 1 ? '' : 's') : 'no findings'),
			' · the numbers behind every plot: tptrace report --json'
		]));
		document.title = 'tptrace report: ' + (nf ? nf + ' finding' + (nf === 1 ? '' : 's') : 'no findings');
	}

	function findings(sec) {
		var list = arr(report.findings);
		sec.setAttribute('data-findings', list.length);
		if (!list.length) {
			sec.appendChild(h('p', { class: 'ok' }, 'Nothing to fix was found in these traces' +
				(arr(report.cannot_judge).length ? ' (but see what could not be judged below).' : '.')));
			return;
		}
		/* a long list starts with its titles, each a link to its card */
		if (list.length > 3)
			sec.appendChild(h('ul', { class: 'toc' }, list.map(function (f, i) {
				return h('li', {}, [h('span', { class: 'sev-dot sev-' + f.severity }, '●'), ' ',
						    h('a', { href: '#finding-' + i }, f.title || f.id || '')]);
			})));
		list.forEach(function (f, i) {
			var sev = ['high', 'medium', 'low'].indexOf(f.severity) >= 0 ? f.severity : 'low';
			var card = h('article', { class: 'finding sev-' + sev, 'data-finding': f.id || '',
						  id: 'finding-' + i }, [
				h('h3', {}, [h('span', { class: 'badge' }, f.severity || '?'), f.title || f.id || '']),
			]);
			var nums = obj(f.numbers);
			if (nums) {
				var keys = Object.keys(nums).filter(function (k) { return !/_unknown$/.test(k); });
				if (keys.length)
					card.appendChild(h('table', { class: 'numbers' }, h('tbody', {}, keys.map(function (k) {
						return h('tr', {}, [h('th', { title: k }, k.replace(/_ns$/, '').replace(/_/g, ' ')),
								   cell(nums, k, function (v) { return fmtByKey(k, v); }, true)]);
					}))));
			}
			var ev = arr(f.evidence);
			if (ev.length) {
				var cols = [['pid', 'pid', plain, true], ['tid', 'tid', plain, true],
					    ['at (from start)', 'ts_ns', fmtAt, true], ['duration', 'dur_ns', fmtNs, true],
					    ['event', 'name'], ['where in the code', 'where', null, false,
					    'no Python stack']];
				var shown = ev.slice(0, 8), more = ev.slice(8);
				card.appendChild(h('div', { class: 'sub' }, 'Evidence (' + ev.length + ' event' +
					(ev.length === 1 ? '' : 's') + '):'));
				card.appendChild(table(cols, shown, { class: 'evidence' }));
				if (more.length)
					card.appendChild(h('details', {}, [h('summary', {}, more.length + ' more'),
									  table(cols, more, { class: 'evidence' })]));
			}
			if (f.fix)
				card.appendChild(h('p', { class: 'fix' }, [h('b', {}, 'Fix: '), String(f.fix)]));
			sec.appendChild(card);
		});
	}

	function cannotJudge(sec) {
		var list = arr(report.cannot_judge);
		sec.setAttribute('data-cannot-judge', list.length);
		if (!list.length) {
			sec.appendChild(h('p', { class: 'note' }, 'Every check had the data it needs.'));
			return;
		}
		sec.appendChild(h('ul', {}, list.map(function (c) {
			return h('li', { 'data-what': c.what || '' }, [h('b', {}, String(c.what || '?')), ': ',
								      String(c.why || 'no reason given')]);
		})));
	}

	function utilization(sec) {
		var tl = obj(report.timeline), util = tl ? tl.utilization : undefined;
		sec.appendChild(h('p', { class: 'note' }, 'Share of each time bin in which the device ran a ' +
			'kernel, copy or memset; one plot per device, on the traces\' clock. Grey: bins whose ' +
			'busy share is unknown.'));
		var devs = arr(util).filter(obj);
		if (!devs.length) {
			absent(sec, 'utilization', 'No GPU utilization: ' +
			       (gpuWhy(tl, 'utilization') || 'the report has no utilization timeline'));
			return;
		}
		var t0 = Infinity, t1 = -Infinity;
		devs.forEach(function (d) {
			if (isNum(d.start_ns) && isNum(d.bin_ns)) {
				t0 = Math.min(t0, d.start_ns);
				t1 = Math.max(t1, d.start_ns + d.bin_ns * arr(d.busy_frac).length);
			}
		});
		devs.forEach(function (d, di) {
			var frac = arr(d.busy_frac);
			if (!isNum(d.start_ns) || !isNum(d.bin_ns) || d.bin_ns <= 0 || !frac.length) {
				absent(sec, 'utilization', devName(d) + ': no bins' +
				       (whyUnknown(d, 'busy_frac') ? ' (' + whyUnknown(d, 'busy_frac') + ')' : ''));
				return;
			}
			var known = frac.filter(isNum), mean = known.reduce(function (a, b) { return a + b; }, 0) /
				(known.length || 1);
			var p = svgBox(150, 48, { 'data-plot': 'utilization', 'data-device': label(d.device),
						  'data-rank': d.rank, 'data-pid': d.pid,
						  'data-points': known.length,
						  'data-unknown-bins': frac.length - known.length });
			var box = p.box, span = t1 - t0 || 1;
			function x(t) { return box.l + (t - t0) / span * (box.r - box.l); }
			box.y = function (f) { return box.b - f * (box.b - box.t); };
			yAxis(p.svg, box, 1, function (v) { return Math.round(v * 100) + '%'; });
			var path = '', inRun = false, k;
			for (k = 0; k <= frac.length; k++) {
				var xa = x(d.start_ns + k * d.bin_ns), xb = x(d.start_ns + (k + 1) * d.bin_ns);
				if (k < frac.length && isNum(frac[k])) {
					var f = Math.max(0, Math.min(1, frac[k]));
					if (!inRun)
						path += 'M' + xa.toFixed(1) + ' ' + box.b;
					path += 'L' + xa.toFixed(1) + ' ' + box.y(f).toFixed(1) +
						'L' + xb.toFixed(1) + ' ' + box.y(f).toFixed(1);
					inRun = true;
				} else {
					if (inRun)
						path += 'L' + xa.toFixed(1) + ' ' + box.b + 'Z';
					inRun = false;
					if (k < frac.length)
						p.svg.appendChild(s('rect', { class: 'unknown-bin', x: xa, y: box.t,
							width: Math.max(0.5, xb - xa), height: box.b - box.t,
							fill: '#b8bcc6', opacity: 0.5 }, tip('unknown')));
				}
			}
			p.svg.appendChild(s('path', { d: path, fill: SERIES[di % SERIES.length],
						      'fill-opacity': 0.55, stroke: SERIES[di % SERIES.length],
						      'stroke-width': 1 }));
			/* time axis: seconds from the first bin of any device */
			var tstep = niceStep(span, 8);
			for (var t = 0; t <= span; t += tstep)
				p.svg.appendChild(s('text', { x: x(t0 + t), y: box.b + 16, 'text-anchor': 'middle' },
						    fmtNs(t)));
			sec.appendChild(h('h3', {}, devName(d) + ': busy ' + fmtPct(mean) +
				' of the time on average' + (known.length < frac.length ? ' (of the known bins)' : '') +
				', bins of ' + fmtNs(d.bin_ns)));
			sec.appendChild(p.svg);
		});
	}

	function idleGaps(sec) {
		var tl = obj(report.timeline), ig = tl ? obj(tl.idle_gaps) : null;
		sec.appendChild(h('p', { class: 'note' }, 'How long the GPU sat idle between one piece of ' +
			'work and the next: many short gaps point at launch overhead, a few long ones at ' +
			'host syncs or waiting on data.'));
		var edges = ig ? arr(ig.edges_ns) : [], counts = ig ? arr(ig.counts) : [];
		/* all zero where the report says it has no GPU data: nothing measured, not "no gaps" */
		var none = !counts.some(function (c) { return isNum(c) && c > 0; });
		if (!counts.length || (none && gpuWhy(tl, 'idle_gaps'))) {
			absent(sec, 'idle_gaps', 'No idle-gap histogram: ' +
			       (gpuWhy(tl, 'idle_gaps') || whyUnknown(ig, 'counts') || 'the report has none'));
			return;
		}
		/* edges are either every bin's bounds (one more than the counts) or their lower
		 * bounds, the last bin open-ended */
		if (edges.length !== counts.length + 1 && edges.length !== counts.length) {
			absent(sec, 'idle_gaps', 'The idle-gap histogram is malformed: ' + counts.length +
			       ' counts and ' + edges.length + ' edges');
			return;
		}
		var max = Math.max.apply(null, counts.filter(isNum).concat([1]));
		var p = svgBox(200, axisLeft(max, fmtCount, 56), { 'data-plot': 'idle_gaps', 'data-bars': counts.length });
		var box = p.box, bw = (box.r - box.l) / counts.length;
		box.y = function (v) { return box.b - v / max * (box.b - box.t); };
		yAxis(p.svg, box, max, fmtCount);
		counts.forEach(function (c, k) {
			var lo = edges[k], hi = edges[k + 1];
			var range = fmtNs(lo) + ' – ' + (isNum(hi) ? fmtNs(hi) : '∞');
			var x = box.l + k * bw;
			if (isNum(c))
				p.svg.appendChild(s('rect', { class: 'bar', x: x + 2, y: box.y(c), width: bw - 4,
					height: box.b - box.y(c), fill: '#2e86c1', 'data-count': c, 'data-lo': lo,
					'data-hi': hi }, tip(range + ': ' + fmtCount(c) + ' gaps')));
			p.svg.appendChild(s('text', { x: x + bw / 2, y: (isNum(c) ? box.y(c) : box.b) - 4,
						      'text-anchor': 'middle', class: 'label' }, isNum(c) ? fmtCount(c) : '?'));
			p.svg.appendChild(s('text', { x: x + bw / 2, y: box.b + 16, 'text-anchor': 'middle' },
					    fmtNs(lo)));
		});
		var total = counts.filter(isNum).reduce(function (a, b) { return a + b; }, 0);
		sec.appendChild(h('h3', {}, fmtCount(total) + ' idle gaps, by length (each bar from its ' +
			'edge to the next one\'s; the last ' + (isNum(edges[counts.length]) ? 'up to ' +
			fmtNs(edges[counts.length]) : 'open-ended') + ')'));
		sec.appendChild(p.svg);
	}

	function kernels(sec) {
		var K = obj(report.kernels), top = K ? arr(K.top).filter(obj) : [];
		sec.appendChild(h('p', { class: 'note' }, 'The kernels that took the most GPU time, with ' +
			'how often they ran and how long one run took.'));
		if (!top.length) {
			absent(sec, 'kernels', 'No kernel breakdown: ' +
			       (gpuWhy(K, 'top') || 'the traces hold no kernels'));
		} else {
			var rowH = 22, left = 330;
			var max = Math.max.apply(null, top.map(function (k) { return isNum(k.total_ns) ? k.total_ns : 0; })
					       .concat([1]));
			var p = svgBox(top.length * rowH + 20, left, { 'data-plot': 'kernels', 'data-bars': top.length });
			var box = p.box, bar = box.r - 230 - box.l;
			top.forEach(function (k, i) {
				var y = 8 + i * rowH, name = String(k.name === undefined ? '?' : k.name);
				var short = name.length > 46 ? name.slice(0, 45) + '…' : name;
				p.svg.appendChild(s('text', { class: 'label', x: left - 8, y: y + 14, 'text-anchor': 'end' },
						    [short, tip(name)]));
				var wd = isNum(k.total_ns) ? Math.max(1, k.total_ns / max * bar) : 0;
				p.svg.appendChild(s('rect', { class: 'bar', x: left, y: y + 3, width: wd, height: rowH - 6,
					fill: '#2e86c1', 'data-name': name, 'data-total-ns': k.total_ns },
					tip(name + '\n' + fmtAny(k.count) + ' runs, ' + fmtNs(k.total_ns) + ' total')));
				var txt = (isNum(k.total_ns) ? fmtNs(k.total_ns) : unknownText(k, 'total_ns')) +
					(isNum(k.share) ? ' (' + fmtPct(k.share) + ')' : '') + ' · ' + fmtAny(k.count) +
					' × ' + (isNum(k.mean_ns) ? fmtNs(k.mean_ns) : '?');
				p.svg.appendChild(s('text', { x: left + wd + 6, y: y + 14 }, txt));
			});
			sec.appendChild(p.svg);
			sec.appendChild(h('details', {}, [h('summary', {}, 'The same as a table, with p50 and p99'),
				table([['kernel', 'name'], ['runs', 'count', fmtCount, true],
					       ['total', 'total_ns', fmtNs, true], ['mean', 'mean_ns', fmtNs, true],
					       ['p50', 'p50_ns', fmtNs, true], ['p99', 'p99_ns', fmtNs, true],
				       ['share of GPU time', 'share', fmtPct, true]], top,
				      { 'data-table': 'kernels' })]));
		}
		var streams = K ? arr(K.by_stream).filter(obj) : [];
		if (streams.length) {
			sec.appendChild(h('h3', {}, 'By stream'));
			sec.appendChild(table([['device', 'device', plain, true], ['stream', 'stream', plain, true],
					       ['kernels', 'kernels', fmtCount, true], ['busy', 'busy_ns', fmtNs, true]],
					      streams, { 'data-table': 'streams' }));
		}
		var L = K ? obj(K.launch) : null;
		if (L) {
			sec.appendChild(h('h3', {}, 'Launches'));
			sec.appendChild(table([['launches', 'count', fmtCount, true],
					       ['CPU time per launch (mean)', 'cpu_ns_mean', fmtNs, true],
					       ['CPU time per launch (p50)', 'cpu_ns_p50', fmtNs, true],
					       ['kernel time (mean)', 'kernel_ns_mean', fmtNs, true],
					       ['launches per second', 'per_s', fix, true]], [L],
					      { 'data-table': 'launch' }));
		}
	}

	function steps(sec) {
		var S = obj(report.steps), perRank = S ? arr(S.per_rank).filter(obj) : [];
		if (S && S.method)
			sec.appendChild(h('p', { class: 'note', 'data-method': S.method }, 'Steps found by: ' +
				S.method + (S.method_detail ? ' (' + S.method_detail + ')' : '')));
		var series = perRank.filter(function (r) { return arr(r.steps).length; });
		if (!series.length) {
			absent(sec, 'steps', 'No steps: ' + ((S && S.method_detail) || whyUnknown(report, 'steps') ||
							     'the report found no training steps'));
		} else {
			/* step wall time, one line per rank: a slow rank is the line above the others */
			var maxWall = 1, maxIdx = 1, npts = 0;
			series.forEach(function (r) {
				arr(r.steps).forEach(function (st) {
					if (isNum(st.wall_ns))
						maxWall = Math.max(maxWall, st.wall_ns);
					if (isNum(st.index))
						maxIdx = Math.max(maxIdx, st.index);
				});
			});
			maxWall *= 1.1;
			var p = svgBox(220, axisLeft(maxWall, fmtNs, 60), { 'data-plot': 'steps',
									    'data-series': series.length });
			var box = p.box;
			box.y = function (v) { return box.b - v / maxWall * (box.b - box.t); };
			function x(i) { return box.l + 10 + i / maxIdx * (box.r - box.l - 20); }
			yAxis(p.svg, box, maxWall, fmtNs);
			var istep = Math.max(1, niceStep(maxIdx, 10));
			for (var i = 0; i <= maxIdx; i += istep)
				p.svg.appendChild(s('text', { x: x(i), y: box.b + 16, 'text-anchor': 'middle' }, 'step ' + i));
			var legend = h('div', { class: 'legend' });
			series.forEach(function (r, ri) {
				var color = SERIES[ri % SERIES.length], pts = [], g = s('g', { 'data-rank': label(r.rank) });
				arr(r.steps).forEach(function (st) {
					if (!isNum(st.wall_ns) || !isNum(st.index))
						return;
					pts.push(x(st.index).toFixed(1) + ',' + box.y(st.wall_ns).toFixed(1));
					g.appendChild(s('circle', { class: 'point', cx: x(st.index), cy: box.y(st.wall_ns),
						r: 3, fill: color, 'data-step': st.index, 'data-wall-ns': st.wall_ns },
						tip(who(r) + ' step ' + st.index + ': ' + fmtNs(st.wall_ns))));
				});
				npts += pts.length;
				g.insertBefore(s('polyline', { points: pts.join(' '), fill: 'none', stroke: color,
							       'stroke-width': 1.5 }), g.firstChild);
				p.svg.appendChild(g);
				legend.appendChild(h('span', {}, [h('i', { style: 'background:' + color }),
					who(r) + (isNum(r.rank) ? ' (pid ' + label(r.pid) + ')' : '')]));
			});
			p.svg.setAttribute('data-points', npts);
			sec.appendChild(h('h3', {}, 'Wall time of each step'));
			sec.appendChild(legend);
			sec.appendChild(p.svg);
			kindBars(sec, series);
		}
		ranks(sec);
		series.forEach(function (r) {
			var sw = obj(r.step_wall_ns) || {};
			sec.appendChild(h('details', { 'data-steps-of': label(r.rank) }, [
				h('summary', {}, who(r) + ': ' + arr(r.steps).length + ' steps, wall mean ' +
				  (isNum(sw.mean) ? fmtNs(sw.mean) : unknownText(sw, 'mean')) + ', p50 ' +
				  (isNum(sw.p50) ? fmtNs(sw.p50) : unknownText(sw, 'p50')) + ', p99 ' +
				  (isNum(sw.p99) ? fmtNs(sw.p99) : unknownText(sw, 'p99'))),
				table([['step', 'index', null, true], ['wall', 'wall_ns', fmtNs, true],
				       ['GPU busy', 'gpu_busy_ns', fmtNs, true], ['GPU idle', 'gpu_idle_ns', fmtNs, true],
				       ['compute', 'compute_ns', fmtNs, true], ['comm', 'comm_ns', fmtNs, true],
				       ['copy', 'copy_ns', fmtNs, true], ['memset', 'memset_ns', fmtNs, true],
				       ['launches', 'launches', fmtCount, true], ['syncs', 'syncs', fmtCount, true]],
				      arr(r.steps).filter(obj))
			]));
		});
	}

	/* the mean step of each rank split by what the GPU did: compute, communication, copies,
	 * memsets, idle. Unknown (no --gpu) is not drawn as an empty bar. */
	function kindBars(sec, series) {
		var rows = series.map(function (r) {
			var sums = {}, n = 0, unknown = null;
			arr(r.steps).forEach(function (st) {
				n++;
				KINDS.forEach(function (kd) {
					if (isNum(st[kd[0]]))
						sums[kd[0]] = (sums[kd[0]] || 0) + st[kd[0]];
					else if (isUnknown(st, kd[0]))
						unknown = unknown || whyUnknown(st, kd[0]) || 'unknown';
				});
			});
			return { rank: r.rank, pid: r.pid, sums: sums, n: n, unknown: unknown };
		});
		var known = rows.filter(function (r) { return !r.unknown && Object.keys(r.sums).length; });
		sec.appendChild(h('h3', {}, 'GPU time of the mean step, by kind'));
		if (!known.length) {
			absent(sec, 'step_kinds', 'No GPU time by kind: ' + (rows.length && rows[0].unknown ||
				gpuWhy(null, 'steps') || 'the steps carry no GPU times'));
			return;
		}
		var max = 1;
		known.forEach(function (r) {
			var t = 0;
			KINDS.forEach(function (kd) { t += (r.sums[kd[0]] || 0) / r.n; });
			max = Math.max(max, t);
		});
		var rowH = 24, left = 80;
		var p = svgBox(known.length * rowH + 36, left, { 'data-plot': 'step_kinds', 'data-bars': known.length });
		var box = p.box;
		known.forEach(function (r, i) {
			var y = 6 + i * rowH, xx = left;
			p.svg.appendChild(s('text', { class: 'label', x: left - 8, y: y + 15, 'text-anchor': 'end' },
					    who(r)));
			KINDS.forEach(function (kd) {
				var v = (r.sums[kd[0]] || 0) / r.n, wd = v / max * (box.r - left);
				if (wd <= 0)
					return;
				p.svg.appendChild(s('rect', { class: 'bar', x: xx, y: y + 3, width: wd, height: rowH - 6,
					fill: kd[2], 'data-kind': kd[1], 'data-ns': Math.round(v) },
					tip(who(r) + ' ' + kd[1] + ': ' + fmtNs(v) + ' per step')));
				xx += wd;
			});
		});
		var ly = known.length * rowH + 24, lx = left;
		KINDS.forEach(function (kd) {
			p.svg.appendChild(s('rect', { x: lx, y: ly - 9, width: 10, height: 10, fill: kd[2] }));
			p.svg.appendChild(s('text', { x: lx + 14, y: ly }, kd[1]));
			lx += 130;
		});
		sec.appendChild(p.svg);
		var skipped = rows.length - known.length;
		if (skipped)
			sec.appendChild(h('p', { class: 'note' }, skipped + ' rank(s) left out: their GPU times are unknown'));
	}

	/* per rank: mean step wall time beside the time spent waiting in collectives */
	function ranks(sec) {
		var list = arr(report.ranks).filter(obj);
		sec.appendChild(h('h3', {}, 'Ranks: mean step time and collective wait'));
		if (!list.length) {
			absent(sec, 'ranks', 'No per-rank numbers: ' + (whyUnknown(report, 'ranks') ||
				'the traces carry no rank (one process, or ranks not recorded)'));
			return;
		}
		/* two panels, each on its own scale: a step's mean and a whole trace's wait are
		 * not the same kind of number */
		var keys = [['step_wall_ns_mean', 'mean step wall time', '#2e86c1'],
			    ['collective_wait_ns', 'time waiting in collectives', '#c0392b']];
		var maxes = keys.map(function (k) {
			var max = 1;
			list.forEach(function (r) { if (isNum(r[k[0]])) max = Math.max(max, r[k[0]]); });
			return max * 1.1;
		});
		var lefts = maxes.map(function (m) { return axisLeft(m, fmtNs, 60); });
		var p = svgBox(220, lefts[0], { 'data-plot': 'ranks', 'data-bars': list.length });
		var full = p.box, half = (full.r - full.l) / 2;
		keys.forEach(function (k, ki) {
			var max = maxes[ki];
			var box = { l: full.l + ki * half + (ki ? lefts[1] - 20 : 0), r: full.l + (ki + 1) * half - 20,
				    t: full.t, b: full.b };
			box.y = function (v) { return box.b - v / max * (box.b - box.t); };
			yAxis(p.svg, box, max, fmtNs);
			p.svg.appendChild(s('text', { class: 'label', x: (box.l + box.r) / 2, y: box.t - 6,
						      'text-anchor': 'middle' }, k[1]));
			var gw = (box.r - box.l) / list.length, bw = Math.min(40, gw * 0.6);
			list.forEach(function (r, i) {
				var x = box.l + i * gw + (gw - bw) / 2;
				if (isNum(r[k[0]]))
					p.svg.appendChild(s('rect', { class: 'bar', x: x, y: box.y(r[k[0]]), width: bw,
						height: box.b - box.y(r[k[0]]), fill: k[2], 'data-rank': label(r.rank),
						'data-key': k[0], 'data-ns': r[k[0]] },
						tip(who(r) + ' ' + k[1] + ': ' + fmtNs(r[k[0]]))));
				else
					p.svg.appendChild(s('text', { x: x + bw / 2, y: box.b - 4, 'text-anchor': 'middle',
						'data-unknown': k[0] }, ['?', tip(unknownText(r, k[0]))]));
				p.svg.appendChild(s('text', { x: x + bw / 2, y: box.b + 16, 'text-anchor': 'middle' },
						    who(r)));
			});
		});
		sec.appendChild(p.svg);
		sec.appendChild(table([['rank', 'rank', plain, true], ['pid', 'pid', plain, true],
				       ['mean step', 'step_wall_ns_mean', fmtNs, true],
				       ['collective wait', 'collective_wait_ns', fmtNs, true]], list,
				      { 'data-table': 'ranks' }));
	}

	function inputs(sec) {
		sec.appendChild(table([['trace', 'path'], ['rank', 'rank', plain, true], ['pid', 'pid', plain, true],
				       ['host', 'hostname'], ['events', 'events', fmtCount, true],
				       ['span', 'span_ns', fmtNs, true], ['--gpu', 'gpu'], ['--mem', 'mem'],
				       ['--py-stacks', 'py_stacks'], ['--torch', 'torch']], arr(report.inputs).filter(obj),
				      { 'data-table': 'inputs' }));
	}

	/* --torch: the operator breakdown, as torch.profiler's key_averages().table() */
	function ops(sec) {
		var o = obj(report.ops);
		if (!o) {
			absent(sec, 'ops', 'No operator breakdown: ' + (whyUnknown(report, 'ops') ||
				'the report has none'));
			return;
		}
		var top = arr(o.top).filter(obj);
		sec.appendChild(h('p', { class: 'note' }, 'torch.profiler\'s slices (--torch): ' +
			fmtCount(o.count) + ' op and record_function slices, ' + fmtNs(o.self_cpu_ns) +
			' of self CPU time. Self time leaves out the slices nested in each one; GPU time is ' +
			'the kernels, copies and memsets each op launched (self: the innermost op around ' +
			'the launch). Sorted by self CPU time' + (top.length > 40 ? '; the first 40 of ' +
			top.length + ' (all in --json)' : '') + '.'));
		sec.appendChild(table([['op', 'name'], ['kind', 'kind'], ['count', 'count', fmtCount, true],
				       ['self CPU', 'self_cpu_ns', fmtNs, true],
				       ['self %', 'self_cpu_share', fmtPct, true],
				       ['total CPU', 'total_cpu_ns', fmtNs, true],
				       ['GPU self', 'gpu_self_ns', fmtNs, true],
				       ['GPU total', 'gpu_total_ns', fmtNs, true],
				       ['launches', 'launches', fmtCount, true]], top.slice(0, 40),
				      { 'data-table': 'ops' }));
	}

	/* ---- tptrace report --compare: two runs side by side */
	function fmtDelta(key, d, k) {
		var v = d[k];
		if (k === 'delta_pct')
			return (v > 0 ? '+' : '') + v.toFixed(1) + '%';
		var t = /_ns$/.test(key) ? fmtNs(v) : fmtByKey(key, v);
		return k === 'delta' && v > 0 ? '+' + t : t;
	}
	function deltaCells(key, d) {
		return ['before', 'after', 'delta', 'delta_pct'].map(function (k) {
			if (!obj(d))
				return h('td', { class: 'num unknown' }, '—');
			if (!isNum(d[k])) {
				var why = whyUnknown(d, k) || '';
				return /^not in the (before|after) traces$/.test(why) ?
					h('td', { class: 'num', title: why }, '—') :
					h('td', { class: 'num unknown', 'data-unknown': k }, unknownText(d, k));
			}
			var cls = 'num' + (k === 'delta' || k === 'delta_pct' ?
				(d[k] > 0 ? ' up' : d[k] < 0 ? ' down' : '') : '');
			return h('td', { class: cls, 'data-key': k, 'data-value': d[k] }, fmtDelta(key, d, k));
		});
	}
	function deltaTable(rows, attrs) {
		/* rows: [label, key, delta object] */
		return h('table', attrs, [
			h('thead', {}, h('tr', {}, ['', 'before', 'after', 'delta', 'delta %'].map(function (t, i) {
				return h('th', { class: i ? 'num' : '' }, t);
			}))),
			h('tbody', {}, rows.map(function (r) {
				return h('tr', { 'data-row': r[1] }, [h('td', { class: 'name' }, r[0])]
					 .concat(deltaCells(r[1], r[2])));
			}))
		]);
	}
	function compare() {
		var C = report;
		app.appendChild(h('h1', {}, 'tptrace report --compare'));
		document.title = 'tptrace report --compare';
		section('The two runs', 'sides', function (sec) {
			sec.appendChild(table([['', 'side'], ['traces', 'traces'], ['steps', 'steps', fmtCount, true],
					       ['found by', 'step_method'], ['findings', 'findings', fmtCount, true]],
				['before', 'after'].map(function (k) {
					var s = obj(C[k]) || {};
					return { side: k, traces: arr(s.inputs).join(', '), steps: s.steps,
						 step_method: s.step_method, findings: s.findings };
				}), { 'data-table': 'sides' }));
		});
		section('Step time', 'compare-steps', function (sec) {
			var st = obj(C.step_wall_ns) || {};
			sec.appendChild(deltaTable([['step wall mean', 'mean_ns', st.mean],
						    ['step wall p50', 'p50_ns', st.p50]], { 'data-table': 'steps' }));
			/* the two means as bars, on one scale */
			var m = obj(st.mean);
			if (m && isNum(m.before) && isNum(m.after)) {
				var max = Math.max(m.before, m.after, 1), rowH = 26;
				var p = svgBox(2 * rowH + 30, 70, { 'data-plot': 'compare_steps', 'data-bars': 2 });
				var box = p.box;
				['before', 'after'].forEach(function (k, i) {
					var w = m[k] / max * (box.r - box.l - 90), y = box.t + i * rowH;
					p.svg.appendChild(s('text', { x: box.l - 6, y: y + 15, 'text-anchor': 'end' }, k));
					p.svg.appendChild(s('rect', { class: 'bar', x: box.l, y: y, width: w, height: rowH - 8,
						fill: i ? '#c0392b' : '#2e86c1', 'data-ns': m[k] }, tip(k + ': ' + fmtNs(m[k]))));
					p.svg.appendChild(s('text', { x: box.l + w + 6, y: y + 15 }, fmtNs(m[k])));
				});
				sec.appendChild(p.svg);
			}
		});
		section('Findings', 'compare-findings', function (sec) {
			var list = arr(C.findings).filter(obj);
			sec.setAttribute('data-findings', list.length);
			if (!list.length) {
				sec.appendChild(h('p', { class: 'ok' }, 'No finding on either side.'));
				return;
			}
			list.forEach(function (f) {
				var head = f.id + (isNum(f.rank) ? ' (rank ' + f.rank + ')' : '') + ': ' +
					(f.severity_before || 'none') + ' → ' + (f.severity_after || 'gone');
				var card = h('article', { class: 'finding sev-' + (f.severity_after || 'low'),
							  'data-finding': f.id, 'data-status': f.status },
					[h('h3', {}, head), h('p', {}, f.title_after || f.title_before)]);
				var nums = obj(f.numbers) || {};
				card.appendChild(deltaTable(Object.keys(nums).filter(function (k) {
					return obj(nums[k]);
				}).map(function (k) { return [k, k, nums[k]]; }), { 'data-table': 'finding-numbers' }));
				sec.appendChild(card);
			});
		});
		[['Top kernels', 'compare-kernels', 'kernels', ['count', 'total_ns', 'mean_ns']],
		 ['Top ops (torch.profiler)', 'compare-ops', 'ops',
		  ['count', 'self_cpu_ns', 'total_cpu_ns', 'gpu_total_ns']]].forEach(function (t) {
			section(t[0], t[1], function (sec) {
				if (!Array.isArray(C[t[2]])) {
					absent(sec, t[2], 'None: ' + (whyUnknown(C, t[2]) || 'not in the report'));
					return;
				}
				var rows = arr(C[t[2]]).filter(obj);
				if (!rows.length) {
					absent(sec, t[2], 'None on either side.');
					return;
				}
				rows.forEach(function (r) {
					sec.appendChild(h('h3', { 'data-name': r.name }, r.name +
						(r.status === 'new' ? ' (new)' : r.status === 'gone' ? ' (gone)' : '')));
					sec.appendChild(deltaTable(t[3].map(function (k) { return [k, k, r[k]]; }),
								   { 'data-table': t[2], 'data-name': r.name }));
				});
			});
		});
	}

	if (isNum(report.tptrace_compare)) {
		compare();
		finish();
		return;
	}
	header();
	section('What to fix', 'findings', findings);
	section('What could not be judged', 'cannot-judge', cannotJudge);
	section('GPU utilization over time', 'utilization', utilization);
	section('GPU idle gaps', 'idle-gaps', idleGaps);
	section('Kernel breakdown', 'kernels', kernels);
	section('Operators (torch.profiler)', 'ops', ops);
	section('Steps and ranks', 'steps', steps);
	section('Traces', 'inputs', inputs);
	finish();

	/* laid out now: a plot whose text runs out of its box is marked (data-clipped: how many
	 * texts), so the tests see what a reader would */
	function finish() {
		Array.prototype.forEach.call(document.querySelectorAll('svg.plot'), function (svg) {
			var vb = svg.viewBox.baseVal, n = 0;
			Array.prototype.forEach.call(svg.querySelectorAll('text'), function (t) {
				var b = t.getBBox();
				if (b.width && (b.x < 0 || b.x + b.width > vb.width))
					n++;
			});
			if (n)
				svg.setAttribute('data-clipped', n);
		});
		document.documentElement.setAttribute('data-rendered', '1');
	}
})();
