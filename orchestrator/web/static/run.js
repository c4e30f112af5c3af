/* The run page, live: step states and progress from the SSE "status" events, per-second IOPS and latency
   charts (SVG) from the "sample" events, and the report once the "end" event says the run is over.
   No inline script anywhere (CSP script-src 'self'): this file reads the page's data- attributes. */
(function () {
  'use strict';
  var main = document.getElementById('run');
  if (!main || main.dataset.live !== 'on' || !window.EventSource) return;
  var NS = 'http://www.w3.org/2000/svg';
  var MAX_POINTS = 900;                      // 15 minutes of seconds per series
  var series = { iops: [], mean: [], p99: [] };
  var charts = { iops: document.getElementById('chart-iops'), lat: document.getElementById('chart-lat') };

  function node(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }

  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
    if (v >= 1e3) return (v / 1e3).toFixed(1) + 'k';
    return v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1);
  }

  function draw(svg, lines) {
    var box = svg.getBoundingClientRect();
    var W = Math.max(box.width, 120), H = Math.max(box.height, 80);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var all = [];
    lines.forEach(function (l) { all = all.concat(l.pts); });
    svg.dataset.points = String(all.length);
    if (!all.length) return;
    var L = 44, R = 8, T = 8, B = 18;
    var t0 = Infinity, t1 = -Infinity, vmax = 0;
    all.forEach(function (p) { t0 = Math.min(t0, p.t); t1 = Math.max(t1, p.t); vmax = Math.max(vmax, p.v); });
    vmax = vmax > 0 ? vmax * 1.1 : 1;
    var x = function (t) { return L + (t1 > t0 ? (t - t0) / (t1 - t0) : 0.5) * (W - L - R); };
    var y = function (v) { return H - B - (v / vmax) * (H - T - B); };
    [0, 0.5, 1].forEach(function (f) {
      node('line', { x1: L, x2: W - R, y1: y(f * vmax), y2: y(f * vmax), 'class': f ? 'grid-line' : 'axis' }, svg);
      node('text', { x: L - 4, y: y(f * vmax) + 4, 'text-anchor': 'end', 'class': 'tick' }, svg)
        .textContent = fmt(f * vmax);
    });
    node('text', { x: L, y: H - 4, 'class': 'tick' }, svg).textContent = '0 s';
    node('text', { x: W - R, y: H - 4, 'text-anchor': 'end', 'class': 'tick' }, svg)
      .textContent = (t1 - t0).toFixed(0) + ' s';
    lines.forEach(function (l) {
      var segs = {};
      l.pts.forEach(function (p) { (segs[p.seg] = segs[p.seg] || []).push(x(p.t).toFixed(1) + ',' + y(p.v).toFixed(1)); });
      Object.keys(segs).forEach(function (k) {
        var pts = segs[k].length === 1 ? [segs[k][0], segs[k][0]] : segs[k];
        node('polyline', { points: pts.join(' '), 'class': 'line ' + l.cls }, svg);
      });
    });
  }

  function redraw() {
    draw(charts.iops, [{ cls: 'iops', pts: series.iops }]);
    draw(charts.lat, [{ cls: 'mean', pts: series.mean }, { cls: 'p99', pts: series.p99 }]);
  }

  function setState(holder, state) {
    if (!holder) return;
    var span = document.createElement('span');
    span.className = 'state s-' + String(state).toLowerCase();
    span.textContent = state;
    holder.replaceChildren(span);
  }

  function text(id, value) {
    var e = document.getElementById(id);
    if (e) e.textContent = value;
    return e;
  }

  function onStatus(d) {
    setState(document.getElementById('run-state'), d.state);
    text('run-done', d.done);
    text('run-total', d.total);
    var why = text('run-reason', d.reason || '');
    if (why) why.hidden = !d.reason;
    var rows = {};
    document.querySelectorAll('#steps tr[data-step]').forEach(function (tr) { rows[tr.dataset.step] = tr; });
    d.steps.forEach(function (st) {
      var tr = rows[st.id];
      if (!tr) return;
      if (tr.dataset.state !== st.state) {
        tr.dataset.state = st.state;
        setState(tr.querySelector('.st'), st.state);
      }
      var fill = tr.querySelector('.bar > span');
      if (fill) fill.style.width = (100 * st.progress).toFixed(1) + '%';
      var attempts = tr.querySelector('.attempts');
      if (attempts && st.attempt !== null && Number(attempts.textContent) < st.attempt) attempts.textContent = st.attempt;
      var reason = tr.querySelector('.reason');
      if (reason) reason.textContent = st.reason || '';
    });
  }

  function push(list, p) {
    list.push(p);
    if (list.length > MAX_POINTS) list.shift();
  }

  function onSample(d) {
    var seg = d.attempt_id;
    if (d.iops !== null) push(series.iops, { t: d.t, v: d.iops, seg: seg });
    if (d.lat_mean_us !== null) push(series.mean, { t: d.t, v: d.lat_mean_us, seg: seg });
    if (d.lat_p99_us !== null) push(series.p99, { t: d.t, v: d.lat_p99_us, seg: seg });
    text('live-step', d.step + (d.round ? ' round ' + d.round : '') + ' · ' + d.elapsed_s.toFixed(0) + ' / ' +
         d.expected_s.toFixed(0) + ' s');
    text('now-iops', d.iops === null ? '' : fmt(d.iops) + ' ' + d.unit + (d.bw_mbs === null ? '' : ' · ' +
         d.bw_mbs.toFixed(1) + ' MB/s'));
    text('now-lat', d.lat_mean_us === null ? '' : fmt(d.lat_mean_us) + ' / ' +
         (d.lat_p99_us === null ? '-' : fmt(d.lat_p99_us)));
    var note = document.getElementById('live-note');
    if (note) note.hidden = true;
    redraw();
  }

  function onEnd(d) {
    source.close();
    setState(document.getElementById('run-state'), d.state);
    ['cancel-form', 'pause', 'resume'].forEach(function (id) {
      var e = document.getElementById(id);
      if (e) (e.closest('form') || e).remove();
    });
    var report = document.getElementById('report');
    if (report && !document.getElementById('report-frame')) {
      var frame = document.createElement('iframe');
      frame.id = 'report-frame';
      frame.setAttribute('sandbox', '');
      frame.title = 'report of run ' + main.dataset.run;
      frame.src = report.dataset.src;
      report.appendChild(frame);
      report.hidden = false;
    }
  }

  var source = new EventSource('/api/runs/' + encodeURIComponent(main.dataset.run) + '/live');
  source.addEventListener('status', function (e) { onStatus(JSON.parse(e.data)); });
  source.addEventListener('sample', function (e) { onSample(JSON.parse(e.data)); });
  source.addEventListener('end', function (e) { onEnd(JSON.parse(e.data)); });
  window.addEventListener('resize', redraw);
})();
