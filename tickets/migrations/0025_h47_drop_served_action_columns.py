"""The state row's served texts of the actions go: each action's are on its row (0024), joined by the reads. Apart
from 0024 so that its rows are committed before the state table is altered."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tickets", "0024_h47_action_rows")]

    operations = [
        migrations.RemoveField(model_name="pinnedstate", name="served_actions"),
        migrations.RemoveField(model_name="pinnedstate", name="served_model_actions"),
    ]
