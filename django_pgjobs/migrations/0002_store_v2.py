"""Store v2: the claim-token fence, the scheduled and cancelled states, priority higher-first (as in
django.tasks), statement-time defaults, and lean partial indexes.

Stop every worker before migrating (a worker of the previous version claims without a token, which
the new ``running_is_claimed`` constraint refuses) and start the new version after. Existing rows
move forward: running jobs (left by the stopped workers) get a claim token so they satisfy the
constraint, and the sweeper recovers them when their lease lapses, as after any crash; ready jobs due
later become ``scheduled``; every priority changes sign, so the same jobs still run first. Backward:
scheduled -> ready, cancelled -> dead, priorities change sign again.
"""

import django_pgjobs.models
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_pgjobs', '0001_initial'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='job',
            name='pgjobs_job_status_valid',
        ),
        migrations.RemoveConstraint(
            model_name='job',
            name='pgjobs_job_running_is_leased',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='pgjobs_job_claim_idx',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='pgjobs_job_claim_any_idx',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='pgjobs_job_lease_idx',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='pgjobs_job_status_finished_idx',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='pgjobs_job_task_status_idx',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='pgjobs_job_queue_status_idx',
        ),
        migrations.AddField(
            model_name='job',
            name='claim_token',
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name='job',
            name='attempts',
            field=models.IntegerField(db_default=0, default=0, help_text='Claims so far; every claim is a new attempt number.'),
        ),
        migrations.AlterField(
            model_name='job',
            name='created_at',
            field=models.DateTimeField(db_default=django_pgjobs.models.StatementTimestamp()),
        ),
        migrations.AlterField(
            model_name='job',
            name='idempotency_key',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AlterField(
            model_name='job',
            name='priority',
            field=models.SmallIntegerField(db_default=0, default=0, help_text='Higher runs first (as in django.tasks).'),
        ),
        migrations.AlterField(
            model_name='job',
            name='run_at',
            field=models.DateTimeField(db_default=django_pgjobs.models.StatementTimestamp()),
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('ready', 'Ready'), ('running', 'Running'), ('done', 'Done'), ('dead', 'Dead'), ('cancelled', 'Cancelled')], db_default='ready', default='ready', max_length=10),
        ),
        migrations.AlterField(
            model_name='job',
            name='updated_at',
            field=models.DateTimeField(db_default=django_pgjobs.models.StatementTimestamp()),
        ),
        # Half of each new page stays free for the next versions of its rows. A heartbeat
        # updates every running job a worker claimed together, i.e. most rows of a page at once:
        # at 70 % only 60 % of the first beat's updates fit on their page (the rest move, writing
        # index entries, and bloat the table: 19 pages for 200 running jobs); at 50 %, 93 % of the
        # first beat and all later ones stay on the page (12 pages). Measured: benchmarks/README.md.
        migrations.RunSQL(
            sql="ALTER TABLE pgjobs_job SET (fillfactor = 50)",
            reverse_sql="ALTER TABLE pgjobs_job SET (fillfactor = 70)",
        ),
        migrations.RunSQL(
            sql="CREATE SEQUENCE pgjobs_job_claim_token_seq",
            reverse_sql="DROP SEQUENCE pgjobs_job_claim_token_seq",
        ),
        migrations.RunSQL(
            sql=[
                "UPDATE pgjobs_job SET claim_token = nextval('pgjobs_job_claim_token_seq') WHERE status = 'running'",
                "UPDATE pgjobs_job SET status = 'scheduled' WHERE status = 'ready' AND run_at > now()",
                # Lower ran first; now higher does. -32768 has no positive twin in a smallint.
                "UPDATE pgjobs_job SET priority = -GREATEST(priority, -32767) WHERE priority <> 0",
            ],
            reverse_sql=[
                "UPDATE pgjobs_job SET status = 'ready' WHERE status = 'scheduled'",
                "UPDATE pgjobs_job SET status = 'dead' WHERE status = 'cancelled'",
                "UPDATE pgjobs_job SET priority = -GREATEST(priority, -32767) WHERE priority <> 0",
            ],
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status', 'ready')), fields=['queue', '-priority', 'run_at', 'id'], name='pgjobs_job_claim_idx'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status', 'ready')), fields=['-priority', 'run_at', 'id'], name='pgjobs_job_claim_any_idx'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status', 'scheduled')), fields=['run_at'], name='pgjobs_job_scheduled_idx'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status', 'running')), fields=['locked_by'], name='pgjobs_job_running_idx'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status__in', ['done', 'dead', 'cancelled'])), fields=['status', 'finished_at'], name='pgjobs_job_finished_idx'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['scheduled', 'ready', 'running', 'done', 'dead', 'cancelled'])), name='pgjobs_job_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('status', 'running'), _negated=True), models.Q(('locked_by__isnull', False), ('lease_expires_at__isnull', False), ('claim_token__isnull', False)), _connector='OR'), name='pgjobs_job_running_is_claimed'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.UniqueConstraint(condition=models.Q(('idempotency_key__isnull', False)), fields=('idempotency_key',), name='pgjobs_job_idempotency_key_uniq'),
        ),
    ]
